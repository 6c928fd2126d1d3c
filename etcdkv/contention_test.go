package etcdkv_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// Writes of distinct keys through each of the library's calls, many at
// once, must not conflict with each other on etcd: a key every such write
// reads and another writes (one shared counter, a range read in the
// transaction) refuses every concurrent commit but one, and the calls'
// throughput falls to one at a time (a quota's check did: about 90
// requests a second instead of 1,900). Each call runs from 8 clients, 6 distinct
// keys each, and the commits refused for a conflict must stay below a
// quarter of its transactions (etcdkv.Stats); what remains are
// transactions that share one of a tenant's 1,024 usage counters. A quota's
// exact check (Quota.MaxCountAge -1) reads every counter of its tenant: its
// case gives each client a tenant of its own.
func TestDistinctWritesDoNotConflict(t *testing.T) {
	t.Parallel()
	const clients, each = 8, 6
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	type call struct {
		name string
		// setup returns one write of key i, on db.
		setup func(t *testing.T, db *kv.DB) func(ctx context.Context, key string) error
	}
	spec := func(key string) sideeffect.Spec {
		return sideeffect.Spec{Kind: "charge", Subject: "order/" + key, Scope: "acme|POST /v1/orders", Key: key, Purpose: "charge", Payload: []byte("100")}
	}
	type order struct{ Ref string }
	type write = func(ctx context.Context, key string) error
	newLedger := func(t *testing.T, db *kv.DB, cfg *ledger.Config) *ledger.Ledger {
		l, err := ledger.New(db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ledgerDo := func(cfg *ledger.Config) func(*testing.T, *kv.DB) write {
		return func(t *testing.T, db *kv.DB) write {
			l := newLedger(t, db, cfg)
			return func(ctx context.Context, key string) error { _, err := l.Do(ctx, quotaReq(key), created); return err }
		}
	}
	newExecutor := func(t *testing.T, db *kv.DB) *sideeffect.Executor {
		x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: providertest.New(providertest.Rates{}, 1)}}})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, tc := range []call{
		{"ledger.Do", ledgerDo(nil)},
		{"ledger.Do with a quota", ledgerDo(&ledger.Config{Quota: &ledger.Quota{MaxRecords: 1 << 30}})},
		// Exact checks read the tenant's counters in the transaction: a
		// client's tenant alone, not the tenants sorting after it, which
		// the other clients write (kv.RangeCursor).
		{"ledger.Do with exact quota checks, a tenant per client", func(t *testing.T, db *kv.DB) write {
			l := newLedger(t, db, &ledger.Config{Quota: &ledger.Quota{MaxRecords: 1 << 30, MaxCountAge: -1}})
			return func(ctx context.Context, key string) error {
				req := quotaReq(key)
				req.Scope = "tenant-" + clientOf(key) + "|POST /v1/orders"
				_, err := l.Do(ctx, req, created)
				return err
			}
		}},
		{"ledger.Claim and Complete", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			l := newLedger(t, db, nil)
			return func(ctx context.Context, key string) error {
				out, err := l.Claim(ctx, quotaReq(key))
				if err != nil {
					return err
				}
				_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 201}, nil)
				return err
			}
		}},
		{"inbox.Handle", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			in, err := inbox.New(db, nil)
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				_, err := in.Handle(ctx, "billing", key, func(kv.Tx) error { return nil })
				return err
			}
		}},
		{"outbox.Add", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			out := outbox.New(db)
			return func(ctx context.Context, key string) error {
				_, _, err := out.Add(ctx, outbox.Event{ID: key, Topic: "orders", Payload: []byte("{}")})
				return err
			}
		}},
		{"sideeffect.Create", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			x := newExecutor(t, db)
			return func(ctx context.Context, key string) error { _, _, err := x.Create(ctx, spec(key)); return err }
		}},
		{"sideeffect.Create and Execute", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			x := newExecutor(t, db)
			return func(ctx context.Context, key string) error {
				in, _, err := x.Create(ctx, spec(key))
				if err != nil {
					return err
				}
				_, err = x.Execute(ctx, in.ID)
				return err
			}
		}},
		{"conditional.Insert and CompareAndSet", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			tbl, err := conditional.NewTable[order](db, "rows", nil)
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				row, err := tbl.Insert(ctx, key, order{Ref: key})
				if err != nil {
					return err
				}
				res, err := tbl.CompareAndSet(ctx, key, row.Version, order{Ref: key + "-paid"})
				if err == nil && !res.Applied {
					err = fmt.Errorf("%s: not applied: %+v", key, res)
				}
				return err
			}
		}},
		// A client's rows read through Range, a group per client: the
		// other clients' inserts land past the group.
		{"conditional.Range and InsertTx, a group per client", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			tbl, err := conditional.NewTable[order](db, "grouped", nil)
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				group := "c" + clientOf(key) + "/"
				return db.Update(ctx, func(tx kv.Tx) error {
					n := 0
					for _, err := range tbl.Range(tx, group, string(kv.PrefixEnd([]byte(group)))) {
						if err != nil {
							return err
						}
						n++
					}
					_, err := tbl.InsertTx(tx, fmt.Sprintf("%s%d", group, n), order{Ref: key})
					return err
				})
			}
		}},
		{"conditional.Upsert", func(t *testing.T, db *kv.DB) func(context.Context, string) error {
			tbl, err := conditional.NewTable(db, "orders", &conditional.Options[order]{Indexes: []conditional.Index[order]{
				{Name: "ref", Key: func(o order) ([]byte, bool) { return []byte(o.Ref), true }},
			}})
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				_, err := tbl.Upsert(ctx, "ref", key, order{Ref: "ref-" + key}, nil)
				return err
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := etcdkv.New(client(t, c), &etcdkv.Options{Prefix: fmt.Sprintf("/contention/%s/", tc.name)})
			if err != nil {
				t.Fatal(err)
			}
			db := dbOn(t, b, nil)
			write := tc.setup(t, db)
			ctx := context.Background()
			if err := write(ctx, "warm-up"); err != nil { // the buckets
				t.Fatal(err)
			}
			before := b.Stats()
			var wg sync.WaitGroup
			errs := make(chan error, clients*each)
			for i := range clients {
				wg.Go(func() {
					for j := range each {
						if err := write(ctx, fmt.Sprintf("k-%d-%d", i, j)); err != nil {
							errs <- err
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			st := b.Stats()
			updates, conflicts := st.Updates-before.Updates, st.Conflicts-before.Conflicts
			t.Logf("%d updates, %d commits refused for a conflict", updates, conflicts)
			if conflicts*4 >= updates {
				t.Errorf("%d of %d commits refused for a conflict: writes of distinct keys meet on a key they all write", conflicts, updates)
			}
		})
	}
}

// clientOf is the client that writes key "k-<client>-<n>" in
// TestDistinctWritesDoNotConflict ("warm" for its warm-up write).
func clientOf(key string) string {
	client, _, _ := strings.Cut(strings.TrimPrefix(key, "k-"), "-")
	return client
}
