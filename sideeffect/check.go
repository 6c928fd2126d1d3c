package sideeffect

import (
	"fmt"
	"time"

	"github.com/oncekv/oncekv/kv"
)

func init() { kv.RegisterChecker("sideeffect", checkTx) }

// checkTx verifies the intent invariants: every intent decodes; a live
// intent (pending, unknown) has exactly one due-index entry, at its
// NextAttemptAt; other intents have none; every due entry and every
// in-flight entry points to a live intent.
func checkTx(tx kv.Tx, report func(string)) {
	live := map[string]time.Time{}
	expiring := map[string]time.Time{}
	for in, err := range Intents(tx, 0) {
		if err != nil {
			report(err.Error())
			continue
		}
		if in.State.live() {
			live[in.ID] = in.NextAttemptAt
			if !dueIdx.Has(tx, in.NextAttemptAt, []byte(in.ID)) {
				report(fmt.Sprintf("intent %s (%s): no due-index entry at %s", in.ID, in.State, in.NextAttemptAt.Format(time.RFC3339Nano)))
			}
		}
		if in.State.Final() && in.FinishedAt.IsZero() {
			report(fmt.Sprintf("intent %s is %s without a finish time", in.ID, in.State))
		}
		if in.State.Final() != !in.ExpiresAt.IsZero() {
			report(fmt.Sprintf("intent %s is %s with expiry %v", in.ID, in.State, in.ExpiresAt))
		}
		if !in.ExpiresAt.IsZero() {
			expiring[in.ID] = in.ExpiresAt
			if !intentExp.Has(tx, in.ExpiresAt, []byte(in.ID)) {
				report(fmt.Sprintf("intent %s: no expiry-index entry", in.ID))
			}
		}
	}
	_ = dueIdx.ForEach(tx, func(at time.Time, id []byte) error {
		want, ok := live[string(id)]
		switch {
		case !ok:
			report(fmt.Sprintf("due-index entry %s %s: no live intent", at.Format(time.RFC3339Nano), id))
		case !want.Equal(at):
			report(fmt.Sprintf("due-index entry %s %s: intent is due at %s", at.Format(time.RFC3339Nano), id, want.Format(time.RFC3339Nano)))
		}
		return nil
	})
	_ = intentExp.ForEach(tx, func(at time.Time, id []byte) error {
		if exp, ok := expiring[string(id)]; !ok || !exp.Equal(at) {
			report(fmt.Sprintf("intent expiry-index entry %s %s matches no final intent", at.Format(time.RFC3339Nano), id))
		}
		return nil
	})
	if ib := inflightNS.Bucket(tx); ib != nil {
		c := ib.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if _, ok := live[string(k)]; !ok {
				report(fmt.Sprintf("in-flight entry %s: no live intent", k))
			}
		}
	}
}

func init() { kv.RegisterSweeper("intent", intentSweeper{}) }

// intentSweeper removes succeeded and failed intents past their retention.
// Live intents and parked ones (needs_attention) have no expiry entry.
type intentSweeper struct{}

func (intentSweeper) Index() kv.TimeIndex { return intentExp }

func (intentSweeper) Expire(tx kv.Tx, at time.Time, key []byte, now time.Time, dryRun bool) (bool, string, error) {
	in, err := loadIntent(tx, string(key))
	switch {
	case err != nil:
		return false, "corrupt", nil
	case in == nil || !in.ExpiresAt.Equal(at):
		return false, "index mismatch", nil
	case !in.State.Final():
		return false, in.State.String(), nil
	case !in.expired(now):
		return false, "not expired", nil
	case dryRun:
		return true, "", nil
	}
	return true, "", deleteIntent(tx, in)
}
