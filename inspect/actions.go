package inspect

import (
	"context"
	"fmt"
	"strconv"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
)

// Operator is what the people on call do: to intents that need them, make
// a parked one due again or finish it with the verdict the provider's own
// dashboard gives; to tenants' usage counters the check finds wrong, count
// them again; to a damaged record, drop it. Actions (on a database) and
// Client (on a running service's admin endpoint, with its token)
// implement it.
type Operator interface {
	// Requeue makes a parked or unknown intent due now with a fresh attempt
	// budget; its next attempt asks the provider first.
	Requeue(ctx context.Context, id string) (Intent, error)
	// Resolve finishes a live or parked intent as succeeded or failed; the
	// service's handler completion runs as if the provider had answered.
	Resolve(ctx context.Context, id string, state sideeffect.State, result []byte, reason string) (Intent, error)
	// RecountUsage counts every tenant's usage again from its records and
	// mends the counters that disagree (ledger.RecountUsage), returning the
	// tenants it changed.
	RecountUsage(ctx context.Context) ([]UsageRecount, error)
	// DropDamaged removes a damaged record the check names: an
	// idempotency record (ledger.DropDamaged) or an inbox mark
	// (inbox.DropDamaged), whose key then runs again, by its log position
	// in hex ("KIND log entry ENTRY: damaged"); an outbox event
	// (outbox.DropDamaged) by its sequence ("event seq N"). A record that
	// decodes is refused.
	DropDamaged(ctx context.Context, kind, entry string) (Dropped, error)
	// RequeueEvent moves a quarantined outbox event back to the pending
	// queue with a fresh attempt budget (outbox.Outbox.Requeue); an event
	// not in quarantine is refused (outbox.ErrNotQuarantined).
	RequeueEvent(ctx context.Context, id string) (Requeued, error)
	// RequeueAllEvents moves every quarantined outbox event that can be
	// read back to the pending queue (outbox.Outbox.RequeueAll).
	RequeueAllEvents(ctx context.Context) (Requeued, error)
}

// Actions carries out operator actions on a database opened for writing.
// With Executor (inside the running service) they take effect at once;
// without it (the CLI on a stopped service's file) they are recorded in the
// file and the service's reconciler applies them on its next pass.
type Actions struct {
	DB       *kv.DB
	Executor *sideeffect.Executor
}

var (
	_ Operator = (*Actions)(nil)
	_ Operator = (*Client)(nil)
)

// Requeue implements Operator.
func (a *Actions) Requeue(ctx context.Context, id string) (Intent, error) {
	var in *sideeffect.Intent
	var err error
	if a.Executor != nil {
		in, err = a.Executor.Requeue(ctx, id)
	} else {
		err = a.DB.Update(ctx, func(tx kv.Tx) error {
			in, err = sideeffect.RequeueTx(tx, id, a.DB.Clock().Now())
			return err
		})
	}
	return a.view(in, err)
}

// Resolve implements Operator.
func (a *Actions) Resolve(ctx context.Context, id string, state sideeffect.State, result []byte, reason string) (Intent, error) {
	var in *sideeffect.Intent
	var err error
	if a.Executor != nil {
		in, err = a.Executor.Resolve(ctx, id, state, result, reason)
	} else {
		err = a.DB.Update(ctx, func(tx kv.Tx) error {
			in, err = sideeffect.ResolveTx(tx, id, sideeffect.Resolution{State: state, Result: result, Reason: reason}, a.DB.Clock().Now())
			return err
		})
	}
	return a.view(in, err)
}

// RecountUsage implements Operator. Running inside the service or on its
// stopped file, it takes effect at once.
func (a *Actions) RecountUsage(ctx context.Context) ([]UsageRecount, error) {
	mended, err := ledger.RecountUsage(ctx, a.DB)
	if err != nil {
		return nil, err
	}
	out := make([]UsageRecount, len(mended))
	for i, m := range mended {
		out[i] = UsageRecount{Tenant: m.Tenant, WasRecords: m.Was.Records, WasBytes: m.Was.Bytes, Damaged: m.Damaged, Records: m.Now.Records, Bytes: m.Now.Bytes}
	}
	return out, nil
}

// DropDamaged implements Operator.
func (a *Actions) DropDamaged(ctx context.Context, kind, entry string) (Dropped, error) {
	pos, err := ParseEntry(kind, entry)
	if err != nil {
		return Dropped{}, err
	}
	var d kv.DroppedEntry
	switch kind {
	case ledger.RecordKind.Name():
		d, err = ledger.DropDamaged(ctx, a.DB, pos)
	case inbox.RecordKind.Name():
		d, err = inbox.DropDamaged(ctx, a.DB, pos)
	default:
		d, err = outbox.DropDamaged(ctx, a.DB, pos)
	}
	if err != nil {
		return Dropped{}, err
	}
	return Dropped{Kind: d.Kind, Entry: formatEntry(d.Kind, d.Entry), Scope: d.Scope, Key: d.Key, Reason: d.Reason}, nil
}

// RequeueEvent implements Operator.
func (a *Actions) RequeueEvent(ctx context.Context, id string) (Requeued, error) {
	if err := outbox.New(a.DB).Requeue(ctx, id); err != nil {
		return Requeued{}, err
	}
	return Requeued{Events: 1}, nil
}

// RequeueAllEvents implements Operator.
func (a *Actions) RequeueAllEvents(ctx context.Context) (Requeued, error) {
	n, err := outbox.New(a.DB).RequeueAll(ctx)
	return Requeued{Events: n}, err
}

// ParseEntry reads a damaged record's name as the check gives it, for
// Operator.DropDamaged: for kind "idempotency" or "inbox", the log
// position in 16 hex digits ("log entry ENTRY"); for "outbox", the
// event's sequence in decimal ("event seq N").
func ParseEntry(kind, entry string) (uint64, error) {
	switch kind {
	case ledger.RecordKind.Name(), inbox.RecordKind.Name():
		pos, err := strconv.ParseUint(entry, 16, 64)
		if err != nil || len(entry) != 16 {
			return 0, badParam("entry %q: want the 16 hex digits the check names (log entry ...)", clip(entry))
		}
		return pos, nil
	case "outbox":
		seq, err := strconv.ParseUint(entry, 10, 64)
		if err != nil {
			return 0, badParam("entry %q: want the event's sequence the check names (event seq N)", clip(entry))
		}
		return seq, nil
	}
	return 0, badParam("kind must be idempotency, inbox or outbox, not %q", clip(kind))
}

// formatEntry writes what ParseEntry reads.
func formatEntry(kind string, pos uint64) string {
	if kind == "outbox" {
		return strconv.FormatUint(pos, 10)
	}
	return fmt.Sprintf("%016x", pos)
}

func (a *Actions) view(in *sideeffect.Intent, err error) (Intent, error) {
	if err != nil {
		return Intent{}, err
	}
	return (&Inspector{db: a.DB, ShowBodies: true}).intentView(in), nil
}
