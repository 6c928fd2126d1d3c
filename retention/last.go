package retention

import (
	"context"
	"encoding/json"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// LastSweep is what the last completed sweep of a database did, kept in
// the database so that a console or the CLI can say when records were
// last removed, even for a stopped service's file.
type LastSweep struct {
	At       time.Time      `json:"at"`
	Duration time.Duration  `json:"duration_ns"`
	Deleted  map[string]int `json:"deleted"` // per record kind
}

var lastNS = keyspace.New("retention.last")

var lastKey = []byte("last")

// recordLast stores st as the last sweep (not for a dry run).
func recordLast(ctx context.Context, db *kv.DB, st Stats) error {
	if st.DryRun || db.ReadOnly() {
		return nil
	}
	l := LastSweep{At: db.Clock().Now().UTC(), Duration: st.Duration, Deleted: map[string]int{}}
	for k, ks := range st.Kinds {
		l.Deleted[string(k)] = ks.Deleted
	}
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return db.Update(ctx, func(tx kv.Tx) error {
		b, err := lastNS.Create(tx)
		if err != nil {
			return err
		}
		return b.Put(lastKey, v)
	})
}

// Last returns the last completed sweep recorded in db; ok is false when
// none was.
func Last(ctx context.Context, db *kv.DB) (last LastSweep, ok bool, err error) {
	err = db.View(ctx, func(tx kv.Tx) error {
		b := lastNS.Bucket(tx)
		if b == nil {
			return nil
		}
		v := b.Get(lastKey)
		if v == nil {
			return nil
		}
		ok = json.Unmarshal(v, &last) == nil
		return nil
	})
	return last, ok, err
}
