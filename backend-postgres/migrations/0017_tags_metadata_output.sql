-- name: tags, metadata and output
--
-- A task's tags (NewTask::tag), stored canonical as ',a,b,' so "has tag a" is a
-- substring search for ',a,'; its metadata (NewTask::metadata), a JSON object as
-- text; and the output its handler recorded (Context::record_output), JSON as text.
-- All NULL when unset; none indexed (the operators' list filters on them).

ALTER TABLE {tasks} ADD COLUMN IF NOT EXISTS tags TEXT;
ALTER TABLE {tasks} ADD COLUMN IF NOT EXISTS metadata TEXT;
ALTER TABLE {tasks} ADD COLUMN IF NOT EXISTS output TEXT;
