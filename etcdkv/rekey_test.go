package etcdkv_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// A rekey on etcd with its default batch (500 records a transaction)
// moves every record to the new key in transactions etcd takes (128
// writes at most); it once failed with TxTooLargeError at the first batch
// that had more than that to reseal. Afterwards the records open with the
// new key alone.
func TestRekeyFitsEtcdTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	open := func(ring *seal.Ring) (*kv.DB, *ledger.Ledger) {
		b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: "/rekey/"})
		require.NoError(t, err)
		db, err := kv.New(b, &kv.Options{Cipher: ring})
		require.NoError(t, err)
		l, err := ledger.New(db, nil)
		require.NoError(t, err)
		return db, l
	}
	const n = 300
	db, l := open(sealtest.Ring(t, 1))
	for i := range n {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/cards", Key: fmt.Sprint("k", i), Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) {
				return ledger.Response{Status: 201, Body: []byte(fmt.Sprint("card ", i))}, nil
			})
		require.NoError(t, err)
	}
	o := outbox.New(db)
	for i := range n {
		_, _, err := o.Add(ctx, outbox.Event{ID: fmt.Sprint("ev", i), Topic: "card.added", Payload: []byte(fmt.Sprint("card ", i))})
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	db, _ = open(sealtest.Ring(t, 2, 1))
	resealed, err := inspect.Rekey(ctx, db, inspect.RekeyOptions{})
	require.NoError(t, err)
	require.Equal(t, 2*n, resealed)
	require.NoError(t, db.Close())

	db, l = open(sealtest.Ring(t, 2)) // the old key gone
	defer db.Close()
	for i := range n {
		rec, err := l.Get(ctx, "acme|POST /v1/cards", fmt.Sprint("k", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint("card ", i), string(rec.Response.Body))
	}
	got := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for ev, err := range outbox.Events(tx, outbox.EventPending) {
			require.NoError(t, err)
			require.Equal(t, "card "+ev.ID[2:], string(ev.Payload))
			got++
		}
		return nil
	}))
	require.Equal(t, n, got)
}
