-- Customized state views for analysts: what participants report, and what the leader aggregated.
-- Times (*_at) are milliseconds since the Unix epoch, as the README's conventions say.

-- One row per (participant, state name, resource, partition) as reported, aggregated or not.
CREATE VIEW reporting.participant_states AS
SELECT s.participant,
       s.state_name,
       s.resource,
       s.partition,
       s.state,
       s.updated_at AS state_set_at,
       r.updated_at AS reported_at,
       r.version AS report_version,
       s.state_name = ANY (c.state_names) AS aggregated
FROM public.participant_states s
JOIN public.participant_resources r
  ON r.participant = s.participant AND r.state_name = s.state_name AND r.resource = s.resource
CROSS JOIN public.state_view_config c;

-- One row per (state name, resource, partition, participant) of every aggregated view.
CREATE VIEW reporting.customized_views AS
SELECT v.state_name,
       v.resource,
       p.partition,
       e.key AS participant,
       e.value AS state,
       v.version AS view_version,
       v.updated_at AS view_updated_at,
       p.updated_at AS partition_updated_at
FROM public.customized_views v
JOIN public.customized_view_partitions p ON p.state_name = v.state_name AND p.resource = v.resource
CROSS JOIN LATERAL jsonb_each_text(p.states) AS e(key, value);
