-- Quinn schema, version 23 (issue 35): the improvement job's run log keeps figures and review ids, never a
-- review's words. Runs logged before kept each version's latest suggestions in job_runs.counts, where a purge
-- of the person they came from could not reach them; they are dropped here (the suggestions themselves stay in
-- conversation_summaries, whose owner purges them).
UPDATE job_runs
   SET counts = json_set(counts, '$.details.versions', (
       SELECT json_group_array(json(json_remove(v.value, '$.suggestions')))
         FROM json_each(job_runs.counts, '$.details.versions') v))
 WHERE job = 'improvement' AND json_valid(counts) AND json_type(counts, '$.details.versions') = 'array';
