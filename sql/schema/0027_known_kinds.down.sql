-- pgq schema, revision 0027 down: pgq.claim as revision 0024 defined it and pgq.explain as revision
-- 0025 did, without jobs_claim_kind_idx.
-- pgq:function claim@previous
-- pgq:function explain@previous
DROP INDEX pgq.jobs_claim_kind_idx;
