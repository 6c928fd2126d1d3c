package inspect

import "time"

// Key is one idempotency record in a listing. Field names are stable.
type Key struct {
	Scope          string     `json:"scope"`
	Key            string     `json:"key"`
	Status         string     `json:"status"`
	Version        uint64     `json:"version"`
	CreatedAt      time.Time  `json:"created_at"`
	CompletedAt    *time.Time `json:"completed_at,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	ExpiresAt      time.Time  `json:"expires_at"`
	Expired        bool       `json:"expired"`
	ResponseStatus int        `json:"response_status,omitempty"`
	StoredBytes    int        `json:"stored_bytes"`
	Compressed     bool       `json:"compressed"`
	// Encrypted is "key id N" when the response is sealed under key N
	// (kv.Options.Cipher); empty when it is stored in clear.
	Encrypted string `json:"encrypted,omitempty"`
	Error     string `json:"error,omitempty"` // a record that failed to decode
	// Entry is a corrupt record's log position in hex, as the check names
	// it and oncekv drop takes it (empty for a readable record, and in a
	// database that keeps records by key).
	Entry string `json:"entry,omitempty"`
}

// Record is one idempotency record in detail.
type Record struct {
	Key
	Fingerprint string              `json:"fingerprint"`
	Owner       string              `json:"owner"`
	Headers     map[string][]string `json:"headers,omitempty"`
	BodyBytes   int                 `json:"body_bytes"`
	// Body is the stored body when requested: text if it is printable UTF-8,
	// otherwise hex (BodyEncoding says which). Empty when redacted; for a
	// sealed response read without its key, "encrypted (key id N)".
	Body         string `json:"body,omitempty"`
	BodyEncoding string `json:"body_encoding,omitempty"` // "text", "hex", "redacted" or "encrypted"
	// Closed: the response is sealed under a key that was not supplied, so
	// its headers, body and size are unknown here.
	Closed bool `json:"closed,omitempty"`
}

// Intent is one side-effect intent.
type Intent struct {
	ID            string     `json:"id"`
	Kind          string     `json:"kind"`
	Subject       string     `json:"subject"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LastError     string     `json:"last_error,omitempty"` // "redacted" without the admin token
	// Resolution is an operator's verdict waiting to be applied
	// ("succeeded" or "failed"); empty when none.
	Resolution string     `json:"resolution,omitempty"`
	Version    uint64     `json:"version"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Payload and Result are shown with the admin token; for a sealed
	// intent read without its key, "encrypted (key id N)" (and so is
	// LastError).
	Payload   string `json:"payload,omitempty"`
	Result    string `json:"result,omitempty"`
	Encrypted string `json:"encrypted,omitempty"` // "key id N" when sealed
	// Error says why a damaged intent cannot be read; its State is then
	// "corrupt" and ID is its key as stored (kv.DB.Check reports it too).
	Error string `json:"error,omitempty"`
}

// Event is one outbox event.
type Event struct {
	Seq         uint64     `json:"seq"`
	ID          string     `json:"id"`
	Topic       string     `json:"topic"`
	Key         string     `json:"key,omitempty"`
	State       string     `json:"state"`
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	PublishedAt *time.Time `json:"published_at,omitempty"`
	Encrypted   string     `json:"encrypted,omitempty"` // "key id N" when the payload is sealed
	// Error says why a damaged event cannot be read (Outbox.CorruptEvents);
	// State is the state it is stored under.
	Error string `json:"error,omitempty"`
}

// Outbox summarises the outbox.
type Outbox struct {
	Pending          int     `json:"pending"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	Published        int     `json:"published"`
	Quarantined      int     `json:"quarantined"`
	// QuarantinedEvents lists the quarantined events, the first
	// MaxListedQuarantined of them in sequence order (Quarantined counts
	// them all; outbox.RequeueAll, the console's "Requeue all", moves them
	// all); OldestPending the oldest pending ones (at most 20), oldest
	// first.
	QuarantinedEvents []Event `json:"quarantined_events"`
	OldestPending     []Event `json:"oldest_pending"`
	// Corrupt counts the events, in any state, that cannot be read;
	// CorruptEvents lists them (at most 100), each with its Error.
	Corrupt       int     `json:"corrupt"`
	CorruptEvents []Event `json:"corrupt_events"`
}

// InboxEntry is one processed message ID.
type InboxEntry struct {
	Consumer    string    `json:"consumer"`
	MessageID   string    `json:"message_id"`
	ProcessedAt time.Time `json:"processed_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Expired     bool      `json:"expired"`
	// Error says why a damaged entry cannot be read; Consumer and
	// MessageID are then as far as they read, and cannot be trusted.
	Error string `json:"error,omitempty"`
}

// Bucket describes one of oncekv's buckets.
type Bucket struct {
	Name       string `json:"name"`
	Keys       int    `json:"keys"`
	Depth      int    `json:"depth"`
	LeafPages  int    `json:"leaf_pages"`
	LeafInuse  int    `json:"leaf_inuse_bytes"`
	BranchPage int    `json:"branch_pages"`
}

// Stats counts records per kind and state, and reports storage.
type Stats struct {
	Path string `json:"path,omitempty"`
	// Backend is the store's kind (kv.Traits.Name): "bbolt", "etcd". The
	// file and page figures are bbolt's only.
	Backend       string         `json:"backend,omitempty"`
	FileBytes     int64          `json:"file_bytes"`
	PageSize      int            `json:"page_size"`
	FreePages     int            `json:"free_pages"`
	PendingPages  int            `json:"pending_pages"`
	FreeBytes     int            `json:"free_bytes"`
	FormatVersion uint32         `json:"format_version"`
	Counts        map[string]int `json:"counts"` // "idempotency.completed", "intent.pending", ...
	Buckets       []Bucket       `json:"buckets"`
	// Tenants is each tenant's use of the ledger, what quotas bound.
	Tenants []TenantUsage `json:"tenants"`
	// WriterHeldSeconds is how long the write transaction running now in
	// the process that answers has held the database's writer (0: none),
	// and WriterQueued the writes queued behind it (kv.DB.Writer). A
	// transaction held for seconds (a handler waiting on something inside
	// its transaction) holds back every write of the service. A tool that
	// opened the file itself reports its own writer: idle.
	WriterHeldSeconds float64 `json:"writer_held_seconds"`
	WriterQueued      int     `json:"writer_queued"`
	// BackendCounts is what the backend counts of its own in the process
	// that answers, since it opened the store (kv.DB.Counters): on etcd
	// its write transactions, the commits refused for a conflict, retries,
	// lost answers and guesses; none on bbolt. A tool that opened the
	// store itself reports its own, near zero: ask the service (--addr).
	BackendCounts []BackendCount `json:"backend_counts,omitempty"`
}

// BackendCount is one of the backend's own counts (kv.Counter).
type BackendCount struct {
	Name        string `json:"name"`
	Value       uint64 `json:"value"`
	Unit        string `json:"unit"`
	Description string `json:"description"`
}

// TenantUsage is one tenant's idempotency records, expired ones included
// until a sweep removes them, and their stored bytes.
type TenantUsage struct {
	Tenant  string `json:"tenant"`
	Records int64  `json:"records"`
	Bytes   int64  `json:"bytes"`
}

// UsageRecount is one tenant whose usage counters a recount mended
// (ledger.UsageRecount): what they said, how many did not decode, and what
// its records add up to, which they say now.
type UsageRecount struct {
	Tenant     string `json:"tenant"`
	WasRecords int64  `json:"was_records"`
	WasBytes   int64  `json:"was_bytes"`
	Damaged    int    `json:"damaged_counters"`
	Records    int64  `json:"records"`
	Bytes      int64  `json:"bytes"`
}

// Requeued says how many quarantined outbox events an operator's requeue
// moved back to the pending queue.
type Requeued struct {
	Events int `json:"events"`
}

// Dropped is a damaged record an operator dropped (kv.DroppedEntry).
type Dropped struct {
	Kind   string `json:"kind"`
	Entry  string `json:"entry"` // as the check names it: a log position in hex, an outbox sequence
	Scope  string `json:"scope,omitempty"`
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
}

// Problem is one consistency problem.
type Problem struct {
	Check   string `json:"check"`
	Message string `json:"message"`
}
