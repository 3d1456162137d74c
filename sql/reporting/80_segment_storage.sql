-- Where each stream segment's bytes are: still in PostgreSQL (the open tail, or everything without
-- a long-term tier) or moved to the long-term tier's chunk objects. Table segments (reader-group
-- state, key-value tables) keep entries, not bytes, and are left out.

CREATE VIEW reporting.segment_storage AS
SELECT split_part(s.name, '/', 1) AS scope,
       split_part(s.name, '/', 2) AS stream,
       s.name AS segment,
       s.kind,
       s.start_offset,
       s.length,
       s.sealed,
       COALESCE(p.bytes, 0) AS postgres_bytes,
       COALESCE(p.chunks, 0) AS postgres_chunks,
       COALESCE(t.bytes, 0) AS tiered_bytes,
       COALESCE(t.chunks, 0) AS tiered_chunks
FROM embedded_segments s
LEFT JOIN (
    SELECT segment, sum(COALESCE(lz4_length, octet_length(data)))::bigint AS bytes, count(*) AS chunks
    FROM segment_chunks GROUP BY segment
) p ON p.segment = s.name
LEFT JOIN (
    SELECT segment, sum(length)::bigint AS bytes, count(*) AS chunks
    FROM segment_tiered_chunks GROUP BY segment
) t ON t.segment = s.name
WHERE s.kind <> 'table';
