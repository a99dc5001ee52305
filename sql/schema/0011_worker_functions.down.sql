-- Revision 0011 down: drop the worker's acknowledgement functions. The query files of an older pgq
-- are plain UPDATEs again, which need the column grants of its roles script (`pgq roles`).
DROP FUNCTION pgq.complete(bigint[], uuid[], jsonb[], bigint[], jsonb[], text);
DROP FUNCTION pgq.complete_skip(bigint[], uuid[], jsonb[], bigint[], jsonb[], boolean);
DROP FUNCTION pgq.fail(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], text);
DROP FUNCTION pgq.fail_skip(bigint[], uuid[], text[], double precision[], boolean[], jsonb[], boolean);
DROP FUNCTION pgq.heartbeat(bigint[], uuid[], double precision[], jsonb[], text);
DROP FUNCTION pgq.heartbeat_skip(bigint[], uuid[], double precision[], jsonb[], boolean);
DROP FUNCTION pgq.snooze(bigint[], uuid[], double precision[], jsonb[], text);
DROP FUNCTION pgq.snooze_skip(bigint[], uuid[], double precision[], jsonb[], boolean);
DROP FUNCTION pgq.rescue(integer);
DROP FUNCTION pgq.error_set(bigint, uuid, text);
