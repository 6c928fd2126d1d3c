package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/internal/txn"
)

// Request identifies one attempt of a logical operation.
type Request struct {
	// Scope separates key spaces: tenant plus endpoint (see Scope). Two
	// scopes never share keys. Its tenant (TenantOf) may not be empty
	// (ValidateScope).
	Scope string
	// Key is the idempotency key chosen by the client (see ValidateKey).
	Key string
	// Fingerprint identifies the request's content (see Fingerprinter).
	Fingerprint Fingerprint
	// Wait, when positive, makes a managed call that meets an in-progress
	// claim wait up to Wait for it to finish (woken by an in-process
	// notification, not by polling) instead of returning *InProgressError at
	// once. The *Tx forms never wait.
	Wait time.Duration
}

// Result is the outcome of a request that did not fail.
type Result struct {
	// Response is the response to return: fresh, or the stored one on replay.
	Response Response
	// Replayed is true when Response comes from an earlier completion.
	Replayed bool
	// Version is the record's version.
	Version uint64
	// Takeover is true when this result finished a request whose earlier
	// attempt had been abandoned (its claim taken over).
	Takeover bool

	stored int // the bytes of the record this call stored (0 on a replay)
}

// Work is the business logic of the single-transaction path. It runs inside
// the ledger's transaction, does its writes through tx, and returns the
// response to store and return. An error rolls everything back and stores
// nothing, so a retry runs the work again. Under Do (group commit) Work may
// run more than once and must have no effect outside tx.
//
// Work writes through tx alone (the Tx forms take it: DoTx, UpsertTx,
// AddTx): a write it starts anew on the same database (a Do, an Update)
// waits for the writer its own transaction holds, for ever, with every
// write of the process behind it; kv.ErrNestedTx instead when the context
// it passes is marked (kv.DB.WithinTx, as idemhttp's handlers' are), or
// whatever the context with kv.Options.CheckNesting (tests, debugging).
type Work func(tx kv.Tx) (Response, error)

// Do runs work at most once per (scope, key) while the record is retained,
// in one transaction with the idempotency record: the business writes, the
// record and the stored response commit together or not at all, so an
// in-progress state is never visible.
//
// Outcomes: no live record → work runs and its response is stored; completed
// with the same fingerprint → the stored response is replayed (Replayed
// true) and work does not run; a different fingerprint → *MismatchError; an
// in-progress two-phase claim on the key → *InProgressError (or a wait, see
// Request.Wait). An error from work is returned and nothing is written.
//
// Do answers replays and conflicts from a read-only transaction and runs new
// work under group commit (kv.DB.Batch).
func (l *Ledger) Do(ctx context.Context, req Request, work Work) (Result, error) {
	if err := validate(req.Scope, req.Key); err != nil {
		return Result{}, err
	}
	if work == nil {
		return Result{}, errNilWork
	}
	o := l.db.Observer()
	if o == nil {
		res, _, err := l.doWaiting(ctx, req, work)
		return res, err
	}
	start := time.Now()
	ctx, end := o.Start(ctx, "oncekv.ledger.do", observe.Attr{Key: "oncekv.scope", Value: req.Scope})
	res, waited, err := l.doWaiting(ctx, req, work)
	end(spanErr(err))
	l.report(ctx, o, "do", req.Scope, start, outcomeOf(err, res.Replayed, res.Takeover, waited), res.stored)
	return res, err
}

// doWaiting runs do, waiting for an attempt in progress when req.Wait
// says so; waited reports that it did.
func (l *Ledger) doWaiting(ctx context.Context, req Request, work Work) (res Result, waited bool, err error) {
	var deadline time.Time
	if req.Wait > 0 {
		deadline = time.Now().Add(req.Wait)
	}
	for {
		res, err := l.do(ctx, req, work)
		if req.Wait > 0 && err != nil {
			if ip := (*InProgressError)(nil); errors.As(err, &ip) && l.Wait(ctx, ip, deadline) {
				waited = true
				continue
			}
		}
		return res, waited, err
	}
}

func (l *Ledger) do(ctx context.Context, req Request, work Work) (Result, error) {
	// Fast path, where the records have a key directory (bbolt):
	// replays, mismatches and conflicts need no write transaction, which
	// would wait for the writer, and a key the directory has never seen
	// needs no look at all. Without one (etcd) that look would be a read
	// for every new key, one round trip more, while the write
	// transaction's own look-up answers the others as cheaply: etcd has
	// no writer to wait for, and a transaction that writes nothing sends
	// no commit. The inbox's Handle does the same.
	var probe recstore.Probe // the keyed layout's is empty
	if l.directory {
		p, a, err := l.peek(ctx, req)
		if a.replayed || err != nil {
			return a.replay, err
		}
		probe = p
	}

	var res Result
	buf := l.entryBuffer()
	err := l.managed(ctx, func(ctx context.Context, tx kv.Tx) error {
		// A run that did not commit left nothing in buf that outlives
		// it (its transaction and its journal are gone), so the next run
		// of this call encodes into it again.
		var err error
		res, err = l.doTx(ctx, tx, req, work, buf, probe)
		if err == nil && !res.Replayed {
			failpoint.Inject(failpoint.LedgerDoBeforeCommit)
		}
		return err
	})
	if err == nil && !res.Replayed {
		failpoint.Inject(failpoint.LedgerDoAfterCommit)
	}
	return res, err
}

// peek admits req (validated) from a read-only transaction, or from the
// directory alone when it has never seen the key (no transaction at all).
// It returns the directory's probe too, for the write transaction's own
// look-up (a miss need not be looked up again there).
func (l *Ledger) peek(ctx context.Context, req Request) (recstore.Probe, admission, error) {
	probe, ok := l.records.Probe(req.Scope, req.Key)
	if !ok {
		return probe, admission{}, nil
	}
	if ref, v, ok := l.records.Cached(ctx, probe, req.Scope, req.Key); ok {
		a, err := l.judge(req, ref, v) // committed recently: no transaction
		return probe, a, err
	}
	p := peeks.Get().(*peek)
	p.l, p.req, p.probe = l, req, probe
	err := l.db.View(ctx, p.fn)
	a := p.a
	*p = peek{fn: p.fn}
	peeks.Put(p)
	return probe, a, err
}

// peek is the state of Ledger.peek, pooled with its transaction function:
// a replay, the hot read path, allocates no closure and no admission.
type peek struct {
	l     *Ledger
	req   Request
	probe recstore.Probe
	a     admission
	fn    func(kv.Tx) error // p.admit, bound once
}

var peeks = sync.Pool{New: func() any {
	p := &peek{}
	p.fn = p.admit
	return p
}}

func (p *peek) admit(tx kv.Tx) (err error) {
	p.a, err = p.l.admitProbed(tx, p.req, p.probe)
	return err
}

// Peek answers a request from the stored record without writing anything:
// a completed record with the same fingerprint returns its replay; a
// mismatch or a live claim returns *MismatchError or *InProgressError; a
// request that must run (no live record, or a claim that may be taken over)
// returns (nil, nil). Middleware uses it to answer retries before reading
// anything else.
func (l *Ledger) Peek(ctx context.Context, req Request) (*Result, error) {
	if err := validate(req.Scope, req.Key); err != nil {
		return nil, err
	}
	_, a, err := l.peek(ctx, req)
	return a.replayResult(), err
}

// PeekTx is Peek inside the caller's transaction. It writes nothing (in a
// writable transaction it may create the ledger's bucket).
func (l *Ledger) PeekTx(tx kv.Tx, req Request) (*Result, error) {
	a, err := l.admit(tx, req)
	return a.replayResult(), err
}

// replayResult returns the replay found, or nil.
func (a *admission) replayResult() *Result {
	if !a.replayed {
		return nil
	}
	r := a.replay
	return &r
}

// batch runs fn under group commit. Rejections (mismatch, in progress, lease
// lost) write nothing, so they are passed through kv.Reject and do not fail
// the batch, which would make every other call in it run again.
func (l *Ledger) batch(ctx context.Context, fn func(tx kv.Tx) error) error {
	return txn.Rejecting(l.db.Batch, isRejection)(ctx, fn)
}

// admission is what an attempt finds under its key.
type admission struct {
	ref recstore.Ref // where prev is
	now time.Time
	// prev is the stored record, live or expired; nil if there is none.
	prev *Record
	// replay is set when a live completed record has the same fingerprint.
	replay   Result
	replayed bool
	// takeover is set when a live in-progress claim may be taken over.
	takeover bool
}

// admit looks the request's key up and applies the rules every path shares:
// a live record with another fingerprint is a mismatch, a live completed one
// is a replay, a live claim that cannot be taken over is in progress.
func (l *Ledger) admit(tx kv.Tx, req Request) (admission, error) {
	if err := validate(req.Scope, req.Key); err != nil {
		return admission{}, err
	}
	return l.admitProbed(tx, req, recstore.Probe{})
}

// admitProbed is admit for a request already validated, starting from
// what the directory said before tx began (Do's read path).
func (l *Ledger) admitProbed(tx kv.Tx, req Request, probe recstore.Probe) (admission, error) {
	l.prefetch(tx, req.Scope, req.Key, true)
	ref, v, err := l.records.GetProbed(tx, req.Scope, req.Key, probe)
	if err != nil {
		return admission{now: l.now()}, &RecordError{Scope: req.Scope, Key: req.Key, Err: err}
	}
	return l.judge(req, ref, v)
}

// judge applies admit's rules to v, the stored value of req's record at
// ref (nil: no record).
func (l *Ledger) judge(req Request, ref recstore.Ref, v []byte) (admission, error) {
	a := admission{now: l.now()}
	if v == nil {
		return a, nil
	}
	// Decoded on the stack: a replay, the common case, allocates only the
	// response's headers and body, and only a replay decodes them (the
	// other outcomes need the head alone).
	var d record.Decoder
	var cur Record
	flags, err := decodeHead(&d, &cur, req.Scope, req.Key, v)
	if err != nil {
		return a, &RecordError{Scope: req.Scope, Key: req.Key, Err: err}
	}
	a.ref = ref
	if !cur.Expired(a.now) && cur.Status == StatusCompleted && cur.Fingerprint.Equal(req.Fingerprint) {
		var resp Response
		if _, err := decodeResponse(&d, &cur, &resp, l.db.Cipher(), req.Scope, req.Key, v, flags, bodyRequired); err != nil {
			return a, &RecordError{Scope: req.Scope, Key: req.Key, Err: err}
		}
		a.replay, a.replayed = Result{Response: resp, Replayed: true, Version: cur.Version}, true
		return a, nil
	}
	if _, err := decodeResponse(&d, &cur, nil, nil, req.Scope, req.Key, v, flags, statusOnly); err != nil {
		return a, &RecordError{Scope: req.Scope, Key: req.Key, Err: err}
	}
	prev := new(Record)
	*prev = cur
	a.prev = prev
	if prev.Expired(a.now) {
		return a, nil
	}
	switch {
	case !prev.Fingerprint.Equal(req.Fingerprint):
		return a, mismatch(prev, req)
	case !l.takeable(prev, a.now):
		return a, l.inProgress(prev, a.now)
	default:
		a.takeover = true
	}
	return a, nil
}

// next returns the version of the record that replaces a.prev.
func (a *admission) next() uint64 {
	if a.prev == nil {
		return 1
	}
	return a.prev.Version + 1
}

func mismatch(prev *Record, req Request) error {
	return &MismatchError{Scope: req.Scope, Key: req.Key, Stored: prev.Fingerprint, Got: req.Fingerprint}
}

var errNilWork = fmt.Errorf("%w: Do needs the work to run (a nil ledger.Work)", ErrInvalidRequest)

// isRejection reports outcomes that write nothing and are not failures of
// the transaction.
func isRejection(err error) bool {
	return errors.Is(err, ErrMismatch) || errors.Is(err, ErrInProgress) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrQuotaExceeded)
}

// DoTx is Do inside the caller's transaction, which must be writable. It
// never commits, never waits, and leaves rollback to the caller: when it
// returns an error from work, the caller must roll back. Rejections
// (*MismatchError, *InProgressError) write nothing.
func (l *Ledger) DoTx(ctx context.Context, tx kv.Tx, req Request, work Work) (Result, error) {
	if work == nil {
		return Result{}, errNilWork
	}
	if err := validate(req.Scope, req.Key); err != nil {
		return Result{}, err
	}
	return l.doTx(ctx, tx, req, work, nil, recstore.Probe{})
}

// doTx is DoTx for a request and work already checked (Do checks them
// once, before its group-commit transaction), with buf for the stored
// entry (Ledger.store) and what the directory said before tx began
// (probe; zero if nothing).
func (l *Ledger) doTx(ctx context.Context, tx kv.Tx, req Request, work Work, buf []byte, probe recstore.Probe) (Result, error) {
	a, err := l.admitProbed(tx, req, probe)
	switch {
	case err != nil:
		return Result{}, err
	case a.replayed:
		return a.replay, nil
	case a.takeover:
		// A dead two-phase claim: all of this path's work is inside the
		// transaction, so running it now is safe. Wake its waiters.
		l.notifyOnCommit(tx, req.Scope, req.Key)
	}
	if a.prev == nil {
		if err := l.checkQuota(ctx, tx, req.Scope); err != nil {
			return Result{}, err
		}
	}
	version := a.next()
	now := a.now

	resp, err := work(tx)
	if err != nil {
		return Result{}, err
	}
	rec := &Record{
		Scope: req.Scope, Key: req.Key, Status: StatusCompleted,
		Fingerprint: req.Fingerprint, Version: version, Owner: l.db.Incarnation(),
		CreatedAt: now, CompletedAt: now, ExpiresAt: l.expiry(req.Scope, now),
		Response: &resp,
	}
	if err := l.store(ctx, tx, a.ref, rec, a.prev, buf); err != nil {
		return Result{}, err
	}
	return Result{Response: resp, Version: version, Takeover: a.takeover, stored: rec.StoredBytes}, nil
}

// prefetch reads, in one request where the backend reads by requests
// (etcd: one round trip instead of two), the record of (scope, key) and
// its tenant's usage counter, which a write transaction reads next when
// it admits a request (the counter if the request makes a new record) or
// completes a claim. Elsewhere it does nothing. absent says the record is
// expected not to exist (a request admitted is most often new), which a
// backend may take without reading it (kv.BucketKey.Absent): on etcd a
// new request's write is then one round trip, its commit.
func (l *Ledger) prefetch(tx kv.Tx, scope, key string, absent bool) {
	if l.directory || !tx.Writable() {
		return
	}
	p := keyspace.Prefetcher(tx)
	if p == nil {
		return
	}
	bucket, k := recstore.KeyOf(recordSpec, scope, key)
	keys := []kv.BucketKey{{Bucket: bucket, Key: k, Absent: absent}}
	if tenant, counts := countedTenant(scope); counts {
		keys = append(keys, kv.BucketKey{Bucket: usageNS.Bytes(), Key: usageKey(tenant, scope, key)})
	}
	p(keys)
}
