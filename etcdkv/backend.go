package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/oncekv/oncekv/kv"
)

// Defaults used when the corresponding Options field is zero.
const (
	// DefaultPrefix namespaces every key the backend writes.
	DefaultPrefix = "/oncekv/"
	// DefaultRequestTimeout bounds one etcd request.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultMaxAttempts bounds the runs of a transaction that keeps
	// meeting conflicts.
	DefaultMaxAttempts = 64
	// DefaultSoloAfter is the attempt from which a losing transaction runs
	// alone within its process.
	DefaultSoloAfter = 4
	// DefaultMaxTxOps is etcd's --max-txn-ops (128): the most compares, and
	// separately the most writes, one transaction may send.
	DefaultMaxTxOps = 128
	// DefaultMaxRequestBytes stays below etcd's --max-request-bytes (1.5
	// MiB), with room for the request's framing.
	DefaultMaxRequestBytes = 1536*1024 - 64*1024
)

// Options configure a Backend. A nil *Options means all defaults.
type Options struct {
	// Prefix namespaces the backend's keys, so several databases (or
	// tests) share one cluster. "" means DefaultPrefix. No database's
	// prefix may begin with another's: with "/app/" and "/app/b/", the
	// second's keys fall inside the first's ranges and show there as
	// buckets it never made. Give each database a sibling prefix
	// ("/app/orders/", "/app/billing/"). The backend records its prefix in
	// the cluster before its first write and refuses one that nests with a
	// recorded prefix (ErrNestedPrefix). A prefix may not begin with NUL.
	Prefix string
	// RequestTimeout bounds one etcd request. 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxAttempts bounds the runs of a conflicting transaction; the last
	// conflict is returned as ErrConflict. 0 means DefaultMaxAttempts.
	MaxAttempts int
	// SoloAfter: from this attempt on, a transaction that keeps losing runs
	// alone within its process. 0 means DefaultSoloAfter.
	SoloAfter int
	// MaxTxOps is the cluster's --max-txn-ops. 0 means DefaultMaxTxOps.
	MaxTxOps int
	// MaxRequestBytes bounds a commit's request. 0 means
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// NoGuessing makes every prefetch read what it names, as before
	// guessing came (doc.go, "Guessing instead of reading"): for a
	// workload whose guesses keep failing, where the backend's own gate
	// is too slow to notice.
	NoGuessing bool
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Prefix == "" {
		r.Prefix = DefaultPrefix
	}
	if r.RequestTimeout == 0 {
		r.RequestTimeout = DefaultRequestTimeout
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.SoloAfter == 0 {
		r.SoloAfter = DefaultSoloAfter
	}
	if r.MaxTxOps == 0 {
		r.MaxTxOps = DefaultMaxTxOps
	}
	if r.MaxRequestBytes == 0 {
		r.MaxRequestBytes = DefaultMaxRequestBytes
	}
	return r
}

func (o *Options) validate() error {
	if err := validPrefix(o.Prefix); err != nil {
		return err
	}
	switch {
	case o.RequestTimeout < 0, o.MaxAttempts < 0, o.SoloAfter < 0, o.MaxRequestBytes < 0:
		return fmt.Errorf("%w: negative limit", ErrInvalidOptions)
	case o.MaxTxOps < 8:
		return fmt.Errorf("%w: MaxTxOps %d leaves no room for a transaction", ErrInvalidOptions, o.MaxTxOps)
	}
	return nil
}

// Backend is a kv.Backend over an etcd cluster. It is safe for concurrent
// use; open one per process and database prefix.
type Backend struct {
	c     *clientv3.Client
	owned bool
	opts  Options
	keys  keys

	// solo lets a transaction that keeps losing run alone: every attempt
	// holds it for reading, a solo attempt for writing.
	solo sync.RWMutex

	leaseMu   sync.Mutex
	lease     clientv3.LeaseID
	leaseFrom time.Time
	leaseUses int // the markers given the lease (markersPerLease)

	// memo and gate serve the guesses of a transaction's first attempts
	// (guess.go).
	memo  memo
	gate  guessGate
	stats stats // Stats, Counters

	// buckets are the bucket names known to exist. The port deletes no
	// bucket, so once seen a marker is read (and compared) no more: a
	// round trip less per bucket a transaction opens.
	buckets sync.Map

	// prefixState says how far the prefix was checked against the
	// registry of prefixes (registry.go); prefixMu serialises the check.
	prefixState atomic.Int32
	prefixMu    sync.Mutex

	// closed is set when Close closes the client: a call that fails
	// afterwards failed because of it (closedErr). closing ends then, and
	// every request to etcd with it (request): the client retries some
	// requests on a closing connection until their own deadlines.
	closed  atomic.Bool
	closing context.Context
	stop    context.CancelFunc
}

var _ kv.Backend = (*Backend)(nil)

// New returns a Backend over client. Close does not close client.
func New(client *clientv3.Client, opts *Options) (*Backend, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	closing, stop := context.WithCancel(context.Background())
	return &Backend{c: client, opts: o, keys: keys{prefix: o.Prefix}, closing: closing, stop: stop}, nil
}

// Open dials the endpoints (comma-separated URLs, as the CLI's --etcd
// takes them) and returns a Backend that closes its client.
func Open(endpoints string, opts *Options) (*Backend, error) {
	o := opts.withDefaults()
	var eps []string
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("%w: no etcd endpoints", ErrInvalidOptions)
	}
	// The client's own log (a warning per retried call while a leader is
	// elected) is silenced: what matters reaches the caller as an error.
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: o.RequestTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcdkv: connect to %s: %w", endpoints, err)
	}
	b, err := New(c, &o)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

// Client returns the etcd client.
func (b *Backend) Client() *clientv3.Client { return b.c }

// Traits reports several writers, no group commit, etcd's transaction
// limit, and a watch for waiters.
func (b *Backend) Traits() kv.Traits {
	return kv.Traits{Name: "etcd", SingleWriter: false, GroupCommit: false, MaxTxOps: b.opts.MaxTxOps - reservedOps, Watch: b.watch}
}

// reservedOps are the writes a commit adds of its own: the commit marker
// and up to a few delete generations.
const reservedOps = 8

// Close closes the client if Open dialled it: a call under way then fails
// with kv.ErrClosed (or kv.ErrCommitUnknown, for a commit sent whose
// outcome it could no longer settle), not with the client's connection
// error. A Backend over a client of the caller's (New) lets calls under way
// finish; the client is the caller's to close.
func (b *Backend) Close() error {
	if !b.owned || b.closed.Swap(true) {
		return nil
	}
	b.stop()
	return b.c.Close()
}

// View runs fn in a read-only transaction: every read at one revision.
func (b *Backend) View(ctx context.Context, fn func(kv.Tx) error) error {
	if err := b.checkPrefix(ctx, false); err != nil {
		return b.closedErr(err)
	}
	for attempt := 1; ; attempt++ {
		t := b.begin(ctx, false)
		err := fn(t)
		if t.err != nil {
			if retryable(t.err) && attempt < b.opts.MaxAttempts {
				b.stats.retried.Add(1)
				b.backoff(ctx, attempt)
				continue
			}
			return b.closedErr(t.err)
		}
		return err
	}
}

// Update runs fn in a serializable optimistic transaction: reads at one
// revision, writes buffered (fn reads its own writes), committed as one
// etcd Txn whose compares say nothing fn read has changed since. A
// conflict runs fn again after a jittered backoff (fn must have no effect
// outside the transaction); after SoloAfter attempts it runs alone within
// the process. A commit whose outcome is unknown (the request timed out
// after it was sent) is resolved by fencing it, never reported as a plain
// failure: ErrCommitUnknown only when etcd cannot be reached to resolve it.
func (b *Backend) Update(ctx context.Context, fn func(kv.Tx) error) error {
	if err := b.checkPrefix(ctx, true); err != nil {
		return b.closedErr(err)
	}
	b.stats.updates.Add(1)
	solo := false
	defer func() {
		if solo {
			b.solo.Unlock()
		}
	}()
	// The first two attempts may guess (guess.go): the second with what
	// the first's conflict read back, and without a backoff between them,
	// since a wrong guess is no contention.
	guess := !b.opts.NoGuessing && b.gate.allow(&b.stats.paused)
	for attempt := 1; ; attempt++ {
		if !solo && attempt > b.opts.SoloAfter {
			b.solo.Lock()
			solo = true
			b.stats.solo.Add(1)
		}
		var out outcome
		var guessed bool
		var err error
		if solo {
			out, guessed, err = b.attempt(ctx, fn, guess && attempt <= 2)
		} else {
			out, guessed, err = b.attemptShared(ctx, fn, guess && attempt <= 2)
		}
		if guessed && attempt == 1 { // the first guesses tell whether guessing pays
			b.stats.guessed.Add(1)
			switch out {
			case committed:
				b.stats.committed.Add(1)
				b.gate.fared(false)
			case guessedWrong:
				b.stats.refused.Add(1)
				b.gate.fared(true)
			case conflict:
				b.stats.conflicted.Add(1)
			case void:
				b.stats.void.Add(1)
			}
		}
		if err == nil && (out == conflict || out == guessedWrong) {
			b.stats.conflicts.Add(1)
		}
		switch {
		case out == void:
			guess = false // run it again, reading for real; no attempt spent
			attempt--
			continue
		case err != nil && retryable(err) && attempt < b.opts.MaxAttempts:
			b.stats.retried.Add(1)
		case err != nil:
			return err
		case out == committed:
			return nil
		case attempt >= b.opts.MaxAttempts:
			b.stats.exhausted.Add(1)
			return fmt.Errorf("%w after %d attempts", ErrConflict, attempt)
		case out == guessedWrong && attempt == 1:
			continue
		}
		b.backoff(ctx, attempt)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// outcome is how one attempt of a write transaction ended.
type outcome int

const (
	conflict     outcome = iota // its commit's compares failed (or it failed)
	committed                   // it committed
	guessedWrong                // its commit was refused, a guess from a stale memo among the causes
	void                        // it guessed, and ended without a commit: nothing it decided holds
)

// attemptShared is attempt beside the process's other transactions (not
// solo): the shared hold is released however attempt ends, a panic in fn
// or in an OnCommit handler included, or the next transaction to go solo
// would wait for it for ever, and every one after that.
func (b *Backend) attemptShared(ctx context.Context, fn func(kv.Tx) error, guess bool) (outcome, bool, error) {
	b.solo.RLock()
	defer b.solo.RUnlock()
	return b.attempt(ctx, fn, guess)
}

// attempt runs fn once and commits, guessing where guess says it may;
// guessed reports that it did.
func (b *Backend) attempt(ctx context.Context, fn func(kv.Tx) error, guess bool) (out outcome, guessed bool, err error) {
	t := b.begin(ctx, true)
	t.guess = guess
	err = fn(t)
	guessed = len(t.guessed) > 0
	if guessed && (t.err != nil || err != nil || len(t.writes) == 0) {
		return void, true, nil // fn decided on guesses nothing confirmed: its error or its answer may be wrong
	}
	if t.err != nil {
		return conflict, false, b.closedErr(t.err) // a read failed: fn saw nothing it can rely on
	}
	if err != nil {
		return conflict, false, err
	}
	ok, err := t.commit()
	if guessed && (errors.Is(err, ErrTxTooLarge) || (err != nil && rejected(err))) {
		return void, true, nil // refused before it applied, for a size the guesses may have made
	}
	err = b.closedErr(err)
	switch {
	case ok:
		for _, name := range t.created {
			b.buckets.Store(name, true)
		}
		for _, h := range t.onCommit {
			h()
		}
		return committed, guessed, err
	case err == nil && t.stale:
		return guessedWrong, true, nil
	}
	return conflict, guessed, err
}

// request returns the context of one request to etcd: ctx's, ended by
// RequestTimeout and by Close.
func (b *Backend) request(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	stop := context.AfterFunc(b.closing, cancel)
	return cctx, func() { stop(); cancel() }
}

// closedErr reports err, a failure of etcd's client, as kv.ErrClosed once
// Close has closed the client (its "connection is closing", a read cut
// short), so that callers meet one error for a closed database, as on
// bbolt. A commit whose outcome is unknown stays kv.ErrCommitUnknown (it
// may have applied), and a transaction too large stays itself.
func (b *Backend) closedErr(err error) error {
	var large *TxTooLargeError
	if err == nil || !b.closed.Load() || errors.Is(err, kv.ErrClosed) || errors.Is(err, ErrCommitUnknown) || errors.As(err, &large) {
		return err
	}
	return fmt.Errorf("%w (%v)", kv.ErrClosed, err)
}

// backoff sleeps a jittered, growing delay before the next attempt.
func (b *Backend) backoff(ctx context.Context, attempt int) {
	ceiling := min(time.Millisecond<<min(attempt, 6), 64*time.Millisecond)
	d := time.Duration(rand.Int64N(int64(ceiling)) + 1) //nolint:gosec // jitter, not a secret
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// markersPerLease bounds the commit markers one lease carries. etcd
// deletes an expired lease's keys in one transaction of its own, and every
// write of the cluster waits for it: a minute of markers at 1,000 commits
// a second (60,000) held writes for 0.36 s on one member here (fsync
// off), 5,000 for 13 ms.
var markersPerLease = 4096

// markerLease returns a lease for commit markers: a new one each minute,
// or after markersPerLease markers, living five minutes, never kept
// alive, so markers vanish a few minutes after their commit whatever
// happens to this process.
func (b *Backend) markerLease(ctx context.Context) (clientv3.LeaseID, error) {
	b.leaseMu.Lock()
	defer b.leaseMu.Unlock()
	if b.lease != 0 && time.Since(b.leaseFrom) < time.Minute && b.leaseUses < markersPerLease {
		b.leaseUses++
		return b.lease, nil
	}
	cctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.c.Grant(cctx, int64((5 * time.Minute).Seconds()))
	if err != nil {
		return 0, fmt.Errorf("etcdkv: lease for commit markers: %w", err)
	}
	b.lease, b.leaseFrom, b.leaseUses = resp.ID, time.Now(), 1
	return b.lease, nil
}

// watch implements kv.Traits.Watch: a channel closed when the key of
// bucket changes (or ctx ends).
func (b *Backend) watch(ctx context.Context, bucket, key []byte) <-chan struct{} {
	ch := make(chan struct{})
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := b.c.Watch(wctx, b.keys.data(bucket, key))
	go func() {
		defer cancel()
		defer close(ch)
		select {
		case <-w:
		case <-ctx.Done():
		}
	}()
	return ch
}

// Errors returned by the backend.
var (
	// ErrInvalidOptions is returned by New and Open for bad Options.
	ErrInvalidOptions = errors.New("etcdkv: invalid options")
	// ErrConflict is returned when a transaction kept meeting concurrent
	// writers for Options.MaxAttempts runs.
	ErrConflict = errors.New("etcdkv: transaction kept conflicting")
	// ErrCommitUnknown is returned when a commit was sent, its answer was
	// lost, and etcd could not be reached to settle whether it applied.
	// The transaction may or may not have applied: read before redoing.
	// It is the port's kv.ErrCommitUnknown, so that code written against
	// kv (idemhttp's answers, say) can tell it apart.
	ErrCommitUnknown = kv.ErrCommitUnknown
)

// TxTooLargeError reports a transaction that cannot fit in one etcd Txn:
// more writes or compares than the cluster's --max-txn-ops, or a request
// over --max-request-bytes. Nothing was written. Split the work into
// smaller transactions.
type TxTooLargeError struct {
	Writes, Compares, Bytes int
	MaxOps, MaxBytes        int
}

func (e *TxTooLargeError) Error() string {
	return fmt.Sprintf("etcdkv: transaction too large for etcd: %d writes and %d compares (limit %d each), %d bytes (limit %d)",
		e.Writes, e.Compares, e.MaxOps, e.Bytes, e.MaxBytes)
}

// Is makes errors.Is(err, ErrTxTooLarge) true of every *TxTooLargeError.
func (e *TxTooLargeError) Is(target error) bool { return target == ErrTxTooLarge }

// ErrTxTooLarge matches every *TxTooLargeError. It is the port's
// kv.ErrTxTooLarge, so that code written against kv (idemhttp's answers,
// say) can tell it apart.
var ErrTxTooLarge = kv.ErrTxTooLarge
