package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/recstore"
)

// Claim is a committed in-progress record owned by this attempt of the
// two-phase path. The holder does its outside work, then calls Complete (or
// Release if the work definitely did not happen).
type Claim struct {
	Scope       string
	Key         string
	Fingerprint Fingerprint
	// Version fences the completion: it commits only while the stored record
	// still has this version.
	Version        uint64
	LeaseExpiresAt time.Time
	CreatedAt      time.Time
	// Takeover is true when an earlier attempt held the key and its claim was
	// taken over (its lease expired, or its process died and RecoverOrphans
	// is set). The earlier attempt's outside work may have happened: ask the
	// outside system before doing it again.
	Takeover bool
	// PreviousOwner is the incarnation that held the key before a takeover.
	PreviousOwner uuid.UUID
	// Orphaned is true when the previous owner was an earlier incarnation of
	// the database (a process that has died), not a slow goroutine of this one.
	Orphaned bool
}

// Outcome is the result of a claim: exactly one of Claim and Replay is set.
type Outcome struct {
	// Claim is set when the caller now owns the key and must do the work.
	Claim *Claim
	// Replay is set when the key completed earlier with the same fingerprint.
	Replay *Result
}

// Claim starts the two-phase path for work that calls something outside the
// database. It commits an in-progress record with a lease and a new version
// before returning, so the outside call happens after the claim is durable.
//
// Outcomes: no live record → a new Claim (version 1, or the old version + 1
// after expiry); completed with the same fingerprint → Replay; different
// fingerprint → *MismatchError; a live claim held by another attempt →
// *InProgressError, or a wait when Request.Wait is set; a claim whose lease
// has expired → a Claim with Takeover set and the version bumped, so the
// paused original attempt's completion matches nothing.
func (l *Ledger) Claim(ctx context.Context, req Request) (Outcome, error) {
	if err := validate(req.Scope, req.Key); err != nil {
		return Outcome{}, err
	}
	o := l.db.Observer()
	if o == nil {
		out, _, err := l.claimWaiting(ctx, req)
		return out, err
	}
	start := time.Now()
	ctx, end := o.Start(ctx, "oncekv.ledger.claim", observe.Attr{Key: "oncekv.scope", Value: req.Scope})
	out, waited, err := l.claimWaiting(ctx, req)
	end(spanErr(err))
	l.report(ctx, o, "claim", req.Scope, start, outcomeOf(err, out.Replay != nil, out.Claim != nil && out.Claim.Takeover, waited), 0)
	return out, err
}

func (l *Ledger) claimWaiting(ctx context.Context, req Request) (out Outcome, waited bool, err error) {
	deadline := time.Now().Add(req.Wait)
	for {
		out, err := managedRun(ctx, l, func(ctx context.Context, tx kv.Tx) (Outcome, error) { return l.ClaimTx(ctx, tx, req) })
		if err == nil && out.Claim != nil {
			failpoint.Inject(failpoint.LedgerClaimAfterCommit)
		}
		var ip *InProgressError
		if req.Wait > 0 && errors.As(err, &ip) && l.Wait(ctx, ip, deadline) {
			waited = true
			continue
		}
		return out, waited, err
	}
}

// ClaimTx is Claim inside the caller's writable transaction. The claim only
// protects the key once the caller commits; it never waits.
func (l *Ledger) ClaimTx(ctx context.Context, tx kv.Tx, req Request) (Outcome, error) {
	a, err := l.admit(tx, req)
	switch {
	case err != nil:
		return Outcome{}, err
	case a.replayed:
		return Outcome{Replay: a.replayResult()}, nil
	}
	if a.prev == nil {
		if err := l.checkQuota(ctx, tx, req.Scope); err != nil {
			return Outcome{}, err
		}
	}
	now := a.now
	c := &Claim{Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint, CreatedAt: now}
	c.Version = a.next()
	if a.takeover {
		c.Takeover, c.PreviousOwner, c.CreatedAt = true, a.prev.Owner, a.prev.CreatedAt
		c.Orphaned = l.db.Traits().SingleWriter && a.prev.Owner != l.db.Incarnation()
	}
	c.LeaseExpiresAt = now.Add(l.cfg.Lease)
	rec := &Record{
		Scope: req.Scope, Key: req.Key, Status: StatusInProgress, Fingerprint: req.Fingerprint,
		Version: c.Version, Owner: l.db.Incarnation(), LeaseExpiresAt: c.LeaseExpiresAt,
		CreatedAt: c.CreatedAt, ExpiresAt: l.expiry(req.Scope, now),
	}
	if err := l.store(ctx, tx, a.ref, rec, a.prev, nil); err != nil {
		return Outcome{}, err
	}
	return Outcome{Claim: c}, nil
}

// owned loads the record of c and checks that c still owns it.
func (l *Ledger) owned(tx kv.Tx, c *Claim, now time.Time) (recstore.Ref, *Record, error) {
	if c == nil {
		return recstore.Ref{}, nil, fmt.Errorf("%w: nil *Claim", ErrInvalidRequest)
	}
	ref, cur, err := l.load(tx, c.Scope, c.Key, false)
	if err != nil {
		return ref, nil, err
	}
	if cur == nil || cur.Expired(now) {
		return ref, nil, &LeaseLostError{Scope: c.Scope, Key: c.Key, Claimed: c.Version}
	}
	if cur.Version != c.Version || cur.Status != StatusInProgress {
		return ref, nil, &LeaseLostError{Scope: c.Scope, Key: c.Key, Claimed: c.Version, Current: cur.Version, Status: cur.Status}
	}
	return ref, cur, nil
}

// Complete finishes a claim: in one transaction it checks that the claim's
// version is still current, runs work (the business writes that go with the
// outside result; may be nil), and stores the completed record with resp.
// If the claim was superseded it returns *LeaseLostError and neither work
// nor the record is written. An error from work rolls everything back and
// leaves the claim in progress. work may run more than once (group commit).
func (l *Ledger) Complete(ctx context.Context, c *Claim, resp Response, work func(tx kv.Tx) error) (Result, error) {
	o := l.db.Observer()
	if o == nil {
		return l.complete(ctx, c, resp, work)
	}
	start := time.Now()
	ctx, end := o.Start(ctx, "oncekv.ledger.complete", observe.Attr{Key: "oncekv.scope", Value: c.Scope})
	res, err := l.complete(ctx, c, resp, work)
	end(spanErr(err))
	l.report(ctx, o, "complete", c.Scope, start, outcomeOf(err, false, false, false), res.stored)
	return res, err
}

func (l *Ledger) complete(ctx context.Context, c *Claim, resp Response, work func(tx kv.Tx) error) (Result, error) {
	var res Result
	err := l.managed(ctx, func(ctx context.Context, tx kv.Tx) error {
		var err error
		res, err = l.CompleteTx(ctx, tx, c, resp, work)
		if err == nil {
			failpoint.Inject(failpoint.LedgerCompleteBeforeCommit)
		}
		return err
	})
	if err == nil {
		failpoint.Inject(failpoint.LedgerCompleteAfterCommit)
	}
	return res, err
}

// CompleteTx is Complete inside the caller's writable transaction.
func (l *Ledger) CompleteTx(ctx context.Context, tx kv.Tx, c *Claim, resp Response, work func(tx kv.Tx) error) (Result, error) {
	now := l.now()
	if c != nil {
		l.prefetch(tx, c.Scope, c.Key, false) // the record, and the counter its new size changes
	}
	ref, cur, err := l.owned(tx, c, now)
	if err != nil {
		return Result{}, err
	}
	if work != nil {
		if err := work(tx); err != nil {
			return Result{}, err
		}
	}
	rec := &Record{
		Scope: c.Scope, Key: c.Key, Status: StatusCompleted, Fingerprint: cur.Fingerprint,
		Version: c.Version, Owner: cur.Owner, CreatedAt: cur.CreatedAt, CompletedAt: now,
		ExpiresAt: l.expiry(c.Scope, now), Response: &resp,
	}
	if err := l.store(ctx, tx, ref, rec, cur, nil); err != nil {
		return Result{}, err
	}
	l.notifyOnCommit(tx, c.Scope, c.Key)
	return Result{Response: resp, Version: c.Version, stored: rec.StoredBytes}, nil
}

// Release gives up a claim whose outside work definitely did not happen (it
// failed before reaching the outside system, or that system reported a
// definite failure): the record is deleted so that a retry runs the work
// again. It returns *LeaseLostError if the claim was superseded.
func (l *Ledger) Release(ctx context.Context, c *Claim) error {
	return l.managed(ctx, func(ctx context.Context, tx kv.Tx) error { return l.ReleaseTx(ctx, tx, c) })
}

// ReleaseTx is Release inside the caller's writable transaction.
func (l *Ledger) ReleaseTx(ctx context.Context, tx kv.Tx, c *Claim) error {
	if c != nil {
		l.prefetch(tx, c.Scope, c.Key, false) // the record, and the counter its removal changes
	}
	ref, cur, err := l.owned(tx, c, l.now())
	if err != nil {
		return err
	}
	if err := l.remove(tx, ref, cur); err != nil {
		return err
	}
	l.notifyOnCommit(tx, c.Scope, c.Key)
	return nil
}

// Extend renews the claim's lease to now + Lease, for outside work that
// takes longer than one lease. It updates c.LeaseExpiresAt, and returns
// *LeaseLostError if the claim was superseded.
func (l *Ledger) Extend(ctx context.Context, c *Claim) error {
	lease, err := managedRun(ctx, l, func(ctx context.Context, tx kv.Tx) (time.Time, error) { return l.extendTx(ctx, tx, c) })
	if err == nil {
		c.LeaseExpiresAt = lease
	}
	return err
}

// ExtendTx is Extend inside the caller's writable transaction. c is updated
// immediately; the new lease holds once the caller commits.
func (l *Ledger) ExtendTx(ctx context.Context, tx kv.Tx, c *Claim) error {
	lease, err := l.extendTx(ctx, tx, c)
	if err == nil {
		c.LeaseExpiresAt = lease
	}
	return err
}

func (l *Ledger) extendTx(ctx context.Context, tx kv.Tx, c *Claim) (time.Time, error) {
	now := l.now()
	ref, cur, err := l.owned(tx, c, now)
	if err != nil {
		return time.Time{}, err
	}
	prev := *cur
	cur.LeaseExpiresAt = now.Add(l.cfg.Lease)
	if exp := l.expiry(c.Scope, now); exp.After(cur.ExpiresAt) {
		cur.ExpiresAt = exp
	}
	return cur.LeaseExpiresAt, l.store(ctx, tx, ref, cur, &prev, nil)
}
