-- pgq schema, revision 0035: what an idle or draining worker pays for nothing, and two per-row costs
-- of the hot path (issues #42 and #47).
--
-- An idle worker asks when the next job is due after each short claim. Its statement read pgq.jobs,
-- and since revision 0033 a statement over pgq.jobs is planned over every day of the history before
-- partition pruning drops them: 0.65 ms of planning per wake-up. pgq.next_run_at reads the live
-- partition itself; a worker may not read partitions (revision 0033), so it is a definer function,
-- and it answers a scoped role set for its own queues only (revision 0021's rule). `pgq roles` grants it
-- to the worker (the migration re-grants when the roles exist). It keeps one generic plan and is
-- never JIT-compiled: custom plans cost some 2 million instructions a call to make, and the generic
-- plan's estimate is over jit_above_cost (compiled at each call: 90-280 ms). Per wake-up of an idle
-- worker (bench/instructions.py --wake: enqueue, claim, acknowledgement, this) 7.44 million
-- instructions fall to 3.53 million; caf8cde's took 4.20.
-- pgq:function next_run_at
REVOKE ALL ON FUNCTION pgq.next_run_at(text[]) FROM PUBLIC;

-- Every worker runs pgq.settle each second. With nothing to settle, its reads of pgq.jobs (and those
-- of pgq.settle_raises over the live partition) were planned all the same, and the planner reads the
-- ends of the live partition's indexes over every dead entry a drain leaves there: 130 ms a call
-- during a drain. Each read now runs only when its small table has a row to settle.
-- pgq:function settle
-- pgq:function settle_raises

-- An acknowledgement inserted the finished rows into the history sorted by id: a sort of whole rows
-- that cost some 4,000 instructions a job and ordered nothing a reader relies on (the history's
-- indexes do). (No SET jit = off on them: a worker's acknowledgement runs in a transaction whose
-- first statement, transaction_guard.sql, turns JIT off already.)
-- pgq:function complete_skip_core
-- pgq:function fail_skip_core

-- The live partition holds no finished job (its bound), so its CHECK that finished_at is set exactly
-- for finished statuses is that finished_at is NULL: one test of a column per written row instead of
-- a list search and a comparison (some 5 % of an enqueue's instructions). The same name, so that errors
-- read as before. NOT VALID, so that the upgrade reads no row under its ACCESS EXCLUSIVE lock of
-- pgq.live_jobs, however many jobs wait: the rows there already satisfy it (the former CHECK and the
-- partition's bound prove it), and it is enforced on every row written from now on.
ALTER TABLE pgq.live_jobs DROP CONSTRAINT jobs_finished_at_iff_finished,
    ADD CONSTRAINT jobs_finished_at_iff_finished CHECK (finished_at IS NULL) NOT VALID;
COMMENT ON CONSTRAINT jobs_finished_at_iff_finished ON pgq.live_jobs IS
    'No job that can still run has a finish time. NOT VALID only because revision 0035 read no row to '
    'add it: the rows it found satisfied it already (the partition holds no finished status); every '
    'row written since is checked.';
