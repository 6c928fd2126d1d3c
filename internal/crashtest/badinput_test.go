package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// TestLibraryBadInputs feeds the library's entry points bad input and
// corrupt stored records: every case gets a clear, typed error (never a
// panic, never a silent success), and the database passes its checks
// afterwards (corrupted records are restored before the final check, to
// show the failed reads wrote nothing).
func TestLibraryBadInputs(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "flips bytes in the bbolt file")
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bad.db")
	{
		// The idempotency record to corrupt is written by an earlier open of
		// the file: a record this process committed is answered from memory
		// (the cache of recent entries), and the flips below stand for
		// damage found in the file.
		first := kvtest.OpenPath(t, path, &kv.Options{NoSync: true})
		l, _ := ledger.New(first, nil)
		_, err := l.Do(ctx, ledger.Request{Scope: "s|POST /x", Key: "victim"}, func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Body: []byte("stored")}, nil
		})
		require.NoError(t, err)
		require.NoError(t, first.Close())
	}
	db := kvtest.OpenPath(t, path, &kv.Options{NoSync: true}, inspect.Checkers()...)
	l, _ := ledger.New(db, nil)
	in, _ := inbox.New(db, nil)
	ob := outbox.New(db)
	x, _ := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: providertest.New(providertest.Rates{}, 1)}}})
	type row struct{ Ref string }
	tbl, _ := conditional.NewTable(db, "rows", &conditional.Options[row]{Indexes: []conditional.Index[row]{{Name: "by_ref", Key: func(r row) ([]byte, bool) { return []byte(r.Ref), r.Ref != "" }}}})
	fpr, _ := fingerprint.New(&fingerprint.Options{MaxDepth: 16})
	ok := func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 200}, nil }
	req := func(scope, key string) ledger.Request { return ledger.Request{Scope: scope, Key: key} }

	// Records to corrupt later (and the idempotency record above).
	victimIntent, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Key: "victim", Purpose: "charge"})
	require.NoError(t, err)
	_, _, err = ob.Add(ctx, outbox.Event{ID: "victim-event", Topic: "t"})
	require.NoError(t, err)
	_, err = tbl.Insert(ctx, "victim-row", row{Ref: "r1"})
	require.NoError(t, err)

	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"key of 0 bytes", func() error { _, err := l.Do(ctx, req("s", ""), ok); return err }, ledger.ErrInvalidKey},
		{"key of 256 bytes", func() error { _, err := l.Do(ctx, req("s", strings.Repeat("k", 256)), ok); return err }, ledger.ErrInvalidKey},
		{"key of 40000 bytes", func() error { _, err := l.Claim(ctx, req("s", strings.Repeat("k", 40000))); return err }, ledger.ErrInvalidKey},
		{"key with NUL", func() error { _, err := l.Do(ctx, req("s", "a\x00b"), ok); return err }, ledger.ErrInvalidKey},
		{"key with UTF-8", func() error { _, err := l.Do(ctx, req("s", "ключ"), ok); return err }, ledger.ErrInvalidKey},
		{"empty scope", func() error { _, err := l.Do(ctx, req("", "k"), ok); return err }, ledger.ErrInvalidScope},
		{"scope with NUL", func() error { _, err := l.Do(ctx, req("a\x00b", "k"), ok); return err }, ledger.ErrInvalidScope},
		{"forged tenant with separator", func() error { _, err := ledger.Scope("acme|POST /refunds", "POST", "/x"); return err }, ledger.ErrInvalidScope},
		{"response too large", func() error {
			_, err := l.Do(ctx, req("s", "big"), func(kv.Tx) (ledger.Response, error) {
				return ledger.Response{Body: make([]byte, ledger.DefaultMaxResponseBytes+1)}, nil
			})
			return err
		}, ledger.ErrResponseTooLarge},
		{"invalid JSON", func() error { _, err := fpr.Sum("POST", "/x", "application/json", []byte(`{"a":`)); return err }, fingerprint.ErrInvalidJSON},
		{"JSON too deep", func() error {
			_, err := fpr.Sum("POST", "/x", "application/json", []byte(strings.Repeat("[", 17)+strings.Repeat("]", 17)))
			return err
		}, fingerprint.ErrJSONTooDeep},
		{"nil claim", func() error { _, err := l.Complete(ctx, nil, ledger.Response{}, nil); return err }, nil},
		{"inbox: empty consumer", func() error { _, err := in.Handle(ctx, "", "m", nil); return err }, inbox.ErrInvalidMessage},
		{"inbox: oversized message ID", func() error { _, err := in.Handle(ctx, "c", strings.Repeat("m", 2000), nil); return err }, inbox.ErrInvalidMessage},
		{"outbox: no ID", func() error { _, _, err := ob.Add(ctx, outbox.Event{Topic: "t"}); return err }, nil},
		{"intent: no key", func() error { _, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge"}); return err }, sideeffect.ErrInvalidSpec},
		{"intent: unknown kind", func() error {
			_, _, err := x.Create(ctx, sideeffect.Spec{Kind: "teleport", Key: "k", Purpose: "p"})
			return err
		}, sideeffect.ErrUnknownKind},
		{"intent: oversized payload", func() error {
			_, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Key: "k", Purpose: "p", Payload: make([]byte, 2<<20)})
			return err
		}, sideeffect.ErrInvalidSpec},
		{"row: empty ID", func() error { _, err := tbl.Insert(ctx, "", row{}); return err }, conditional.ErrInvalidID},
		{"row: unknown index", func() error { _, err := tbl.Upsert(ctx, "nope", "id", row{}, nil); return err }, conditional.ErrUnknownIndex},
		{"policy: retention below the lease", func() error {
			return retention.Policy{Idempotency: time.Second}.Validate(retention.Constraints{Lease: time.Minute})
		}, retention.ErrInvalidPolicy},
	}

	// Corrupt stored records (a flipped byte), met on every read path.
	flip := func(bucket string, key []byte) (restore func()) {
		if bucket == "ledger" { // the records' log: find where the record is
			require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
				b, k, ok := recstore.Locate(tx, recstore.Spec{Name: "ledger"}, "s|POST /x", "victim")
				require.True(t, ok)
				bucket, key = strings.TrimPrefix(string(b), record.ReservedPrefix), k
				return nil
			}))
		}
		var orig []byte
		require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(record.ReservedPrefix + bucket))
			orig = bytes.Clone(b.Get(key))
			bad := bytes.Clone(orig)
			bad[len(bad)/2] ^= 0x20
			return b.Put(key, bad)
		}))
		return func() {
			require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte(record.ReservedPrefix+bucket)).Put(key, orig) }))
		}
	}
	corrupt := []struct {
		name   string
		bucket string
		key    []byte
		reads  []func() error
	}{
		{"corrupt idempotency record", "ledger", nil, []func() error{
			func() error { _, err := l.Do(ctx, req("s|POST /x", "victim"), ok); return err },
			func() error { _, err := l.Claim(ctx, req("s|POST /x", "victim")); return err },
			func() error { _, err := l.Get(ctx, "s|POST /x", "victim"); return err },
			func() error {
				return db.View(ctx, func(tx kv.Tx) error {
					for _, err := range l.Records(tx, ledger.ListOptions{}) {
						if err != nil {
							return err
						}
					}
					return nil
				})
			},
		}},
		{"corrupt intent", "intent", []byte(victimIntent.ID), []func() error{
			func() error { _, err := x.Get(ctx, victimIntent.ID); return err },
			func() error { _, err := x.Execute(ctx, victimIntent.ID); return err },
		}},
		{"corrupt outbox event", "outbox", []byte{0, 0, 0, 0, 0, 0, 0, 1}, []func() error{
			func() error {
				return db.View(ctx, func(tx kv.Tx) error {
					for _, err := range outbox.Events(tx, outbox.EventPending) {
						if err != nil {
							return err
						}
					}
					return nil
				})
			},
			// The relay and Lag go on past it (it could never be
			// published), counting it apart: the error they report is
			// the listing's, when they do.
			func() error {
				r, _ := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error { return nil })})
				st, err := r.RunOnce(ctx)
				l, lerr := ob.Lag(ctx)
				if err != nil || lerr != nil || st.Damaged != 1 || l.Damaged != 1 || l.Pending != 0 {
					return fmt.Errorf("relay %+v %v, lag %+v %v", st, err, l, lerr)
				}
				return db.View(ctx, func(tx kv.Tx) error {
					for _, err := range outbox.Events(tx, outbox.EventPending) {
						return err
					}
					return nil
				})
			},
		}},
		{"corrupt row", "table/rows", []byte("victim-row"), []func() error{
			func() error { _, err := tbl.Get(ctx, "victim-row"); return err },
			func() error {
				_, err := tbl.AssignField(ctx, "victim-row", func(*row) {}, conditional.Cond{})
				return err
			},
			func() error { _, err := tbl.GetByIndex(ctx, "by_ref", []byte("r1")); return err },
		}},
	}

	n := 0
	for _, c := range cases {
		var err error
		require.NotPanics(t, func() { err = c.run() }, c.name)
		require.Error(t, err, c.name)
		if c.want != nil {
			require.ErrorIs(t, err, c.want, c.name)
		}
		require.NotEmpty(t, err.Error())
		n++
	}
	for _, c := range corrupt {
		restore := flip(c.bucket, c.key)
		for i, read := range c.reads {
			var err error
			require.NotPanics(t, func() { err = read() }, "%s read %d", c.name, i)
			require.ErrorIs(t, err, kv.ErrCorrupt, "%s read %d", c.name, i)
			require.Contains(t, err.Error(), "checksum mismatch", "%s read %d", c.name, i)
			n++
		}
		problems, err := db.Check(ctx, inspect.Checkers()...)
		require.NoError(t, err)
		require.NotEmpty(t, problems, "%s: the check reports it", c.name)
		restore()
	}
	t.Logf("%d bad inputs", n)
	require.GreaterOrEqual(t, n, 30)
	// The replay still works and nothing partial was written.
	res, err := l.Do(ctx, req("s|POST /x", "victim"), ok)
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, "stored", string(res.Response.Body))
	_, err = l.Get(ctx, "s", "big")
	require.True(t, errors.Is(err, ledger.ErrNotFound))
}
