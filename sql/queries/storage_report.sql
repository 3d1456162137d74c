-- Where the segment stores keep a stream's bytes (app/store/storage_report.py).

-- name: stream_segments
-- $1: "scope/stream/", the prefix of every segment name of the stream (names hold no other "/").
SELECT s.name, s.kind, s.start_offset, s.length, s.sealed,
       COALESCE(p.bytes, 0) AS postgres_bytes, COALESCE(p.chunks, 0) AS postgres_chunks,
       COALESCE(t.bytes, 0) AS tiered_bytes, COALESCE(t.chunks, 0) AS tiered_chunks
FROM embedded_segments s
LEFT JOIN LATERAL (
    SELECT sum(COALESCE(c.lz4_length, octet_length(c.data)))::bigint AS bytes, count(*) AS chunks
    FROM segment_chunks c WHERE c.segment = s.name
) p ON true
LEFT JOIN LATERAL (
    SELECT sum(t.length)::bigint AS bytes, count(*) AS chunks
    FROM segment_tiered_chunks t WHERE t.segment = s.name
) t ON true
WHERE starts_with(s.name, $1) AND s.kind <> 'table'
ORDER BY s.name;
