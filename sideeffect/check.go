package sideeffect

import (
	"fmt"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// RecordKind is the kind of the intents: pass it to retention.Sweep to
// remove succeeded and failed intents past their retention (live intents
// and parked ones, needs_attention, have no expiry and stay), and to
// kv.DB.Check to verify them.
var RecordKind kv.RecordKind = &keyspace.Kind[*Intent]{
	KindName:  "intent",
	Records:   intentsNS,
	Expiry:    intentExp,
	Decode:    func(k, v []byte, _ bool) (*Intent, error) { return decodeIntent(k, v) },
	ExpiresAt: func(in *Intent) time.Time { return in.ExpiresAt },
	Keep: func(in *Intent, _ time.Time) string {
		if !in.State.Final() {
			return in.State.String()
		}
		return ""
	},
	Remove: func(tx kv.Tx, _ kv.Bucket, _ []byte, in *Intent) error { return deleteIntent(tx, in) },
	CheckRecord: func(tx kv.Tx, _ []byte, in *Intent, report func(string)) {
		if in.blob != nil {
			if ring := kv.CipherOf(tx); ring != nil {
				if _, err := ring.Open(nil, in.blob, intentAAD(in.ID)); err != nil {
					report(fmt.Sprintf("intent %s: sealed fields do not open: %v", in.ID, err))
				}
			}
		}
		if in.State.Final() && in.FinishedAt.IsZero() {
			report(fmt.Sprintf("intent %s is %s without a finish time", in.ID, in.State))
		}
		if in.State.Final() != !in.ExpiresAt.IsZero() {
			report(fmt.Sprintf("intent %s is %s with expiry %v", in.ID, in.State, in.ExpiresAt))
		}
	},
	CheckMore: checkLive,
}

// checkLive verifies the scheduling invariants: a live intent (pending,
// unknown) has exactly one due-index entry, at its NextAttemptAt; other
// intents have none; every due entry and every in-flight entry points to a
// live intent.
func checkLive(tx kv.Tx, report func(string)) {
	live := map[string]time.Time{}
	for in, err := range Intents(tx, 0) {
		if err != nil {
			continue // reported by the record check
		}
		if in.State.live() {
			live[in.ID] = in.NextAttemptAt
			if !dueIdx.Has(tx, in.NextAttemptAt, []byte(in.ID)) {
				report(fmt.Sprintf("intent %s (%s): no due-index entry at %s", in.ID, in.State, in.NextAttemptAt.Format(time.RFC3339Nano)))
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
	if ib := inflightNS.Bucket(tx); ib != nil {
		c := ib.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if _, ok := live[string(k)]; !ok {
				report(fmt.Sprintf("in-flight entry %s: no live intent", k))
			}
		}
	}
}

// Reseal is the intents' part of a rekey (inspect.Rekey): in tx, it visits
// up to limit intents after the cursor after (nil: from the start) and
// rewrites those not sealed under ring's current key (intents stored in
// clear included). It returns the cursor to resume after (nil when done)
// and how many it rewrote; an intent that does not open fails it.
func Reseal(tx kv.Tx, ring *seal.Ring, after []byte, limit int) (next []byte, resealed int, err error) {
	return sealing.Rewrite(intentsNS.Bucket(tx), after, limit, func(k, v []byte) ([]byte, error) {
		in, err := decodeIntentWith(ring, k, v, true)
		if err != nil {
			return nil, err
		}
		if in.Sealed && in.KeyID == ring.Current() {
			return nil, nil
		}
		var e record.Encoder
		return encodeIntentWith(&e, ring, in), nil
	})
}
