package failpoint

// The failpoints, in the order a request meets them.
const (
	KVUpdateBeforeCommit = "kv.update.before-commit"
	KVUpdateAfterCommit  = "kv.update.after-commit"
	KVBatchBeforeCommit  = "kv.batch.before-commit"
	KVBatchAfterCommit   = "kv.batch.after-commit"

	LedgerDoBeforeCommit       = "ledger.do.before-commit"
	LedgerDoAfterCommit        = "ledger.do.after-commit"
	LedgerClaimAfterCommit     = "ledger.claim.after-commit"
	LedgerCompleteBeforeCommit = "ledger.complete.before-commit"
	LedgerCompleteAfterCommit  = "ledger.complete.after-commit"
	InboxBeforeCommit          = "inbox.before-commit"
	InboxAfterCommit           = "inbox.after-commit"

	TakeoverAfterCommit          = "sideeffect.takeover.after-commit"
	ReconcileTakeoverAfterCommit = "sideeffect.reconcile.takeover.after-commit"
	ProviderBeforeCall           = "sideeffect.provider.before-call"
	ProviderAfterCall            = "sideeffect.provider.after-call"
	RecordBeforeCommit           = "sideeffect.record.before-commit"
	RecordAfterCommit            = "sideeffect.record.after-commit"
	OutboxAddAfterCommit         = "outbox.add.after-commit"
	RelayBeforePublish           = "outbox.relay.before-publish"
	RelayAfterPublish            = "outbox.relay.after-publish"
	RelayAfterMark               = "outbox.relay.after-mark"

	SweepBeforeCommit = "retention.sweep.before-commit"
	SweepAfterCommit  = "retention.sweep.after-commit"

	// The record log's directory: an entry added, not yet committed; the
	// directory rebuilt at open; a migration batch committed; the tail's
	// entries moved to the log, not yet committed.
	RecstoreDirectoryAdded = "recstore.directory.added"
	RecstoreRebuilt        = "recstore.rebuilt"
	RecstoreMigrated       = "recstore.migrated"
	RecstoreTailMoved      = "recstore.tail.moved"

	// A rekey batch committed (inspect.Rekey).
	RekeyBetweenBatches = "kv.rekey.between-batches"
)

// All lists every failpoint.
var All = []string{
	KVUpdateBeforeCommit, KVUpdateAfterCommit, KVBatchBeforeCommit, KVBatchAfterCommit,
	LedgerDoBeforeCommit, LedgerDoAfterCommit, LedgerClaimAfterCommit, LedgerCompleteBeforeCommit,
	LedgerCompleteAfterCommit, InboxBeforeCommit, InboxAfterCommit,
	TakeoverAfterCommit, ReconcileTakeoverAfterCommit, ProviderBeforeCall,
	ProviderAfterCall, RecordBeforeCommit, RecordAfterCommit, OutboxAddAfterCommit,
	RelayBeforePublish, RelayAfterPublish, RelayAfterMark, SweepBeforeCommit, SweepAfterCommit,
	RecstoreDirectoryAdded, RecstoreRebuilt, RecstoreMigrated, RecstoreTailMoved, RekeyBetweenBatches,
}
