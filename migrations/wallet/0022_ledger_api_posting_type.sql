-- The ledger's posting type in its SQL interface (ledger_api, migration 0015): what a service's
-- own function takes to hand postings on to ledger_api.post_batch, so that its signature names
-- nothing of the schema ledger (tests/test_ledger_boundary.py). A domain over the ledger's own
-- composite, without a constraint: the same fields in the same order (the ledger's
-- Ledger.batch_arguments builds them), nothing checked on the way (the posting function checks
-- every field), and an array of it is taken by ledger_api.post_batch as it is (an array of a
-- domain coerces to its base type's array by relabelling, no element is rebuilt). The type
-- stays the ledger's: a field added to ledger.posting_in is one here too.
CREATE DOMAIN ledger_api.posting_in AS ledger.posting_in;
