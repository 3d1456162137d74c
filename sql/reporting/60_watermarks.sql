-- Watermarks: the writers' last reports and the watermarks emitted from them.

CREATE VIEW reporting.writer_marks AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       w.writer,
       w.mark_time,
       w.position,
       w.alive,
       w.inactive_since
FROM writer_marks w
JOIN streams s ON s.id = w.stream_id;

CREATE VIEW reporting.watermarks AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       w.seq,
       w.lower_time_bound,
       w.upper_time_bound,
       w.stream_cut,
       w.created_at AS creation_time
FROM watermarks w
JOIN streams s ON s.id = w.stream_id;
