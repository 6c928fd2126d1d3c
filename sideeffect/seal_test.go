package sideeffect_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

const secretPayload = "card 4111-1111-1111-1111"

// Sealed intents: payload, result, provider error text and an operator's
// resolution round-trip through the executor; none of them is in the
// file; read without the key the intent is Closed with those fields
// empty, and GetTx fails typed; Reseal moves them to a new key.
func TestSealedIntents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "i.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	var comp completions
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": handler(fake, &comp)}, MaxAttempts: 1})
	require.NoError(t, err)
	parked, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/1", Key: "1", Purpose: "charge", Payload: []byte(secretPayload)})
	require.NoError(t, err)
	got, err := x.Execute(ctx, parked.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateNeedsAttention, got.State)
	require.NotEmpty(t, got.LastError)
	// A verdict waiting to be applied: its result and reason are sealed too.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, err := sideeffect.ResolveTx(tx, parked.ID, sideeffect.Resolution{State: sideeffect.StateSucceeded,
			Result: []byte("ch_secret_result"), Reason: "dashboard says charged: secret-reason"}, time.Now())
		return err
	}))
	fake.Script = nil
	ok, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/2", Key: "2", Purpose: "charge", Payload: []byte(secretPayload)})
	require.NoError(t, err)
	done, err := x.Execute(ctx, ok.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, done.State)
	require.True(t, done.Sealed)
	require.Equal(t, uint32(1), done.KeyID)

	var back *sideeffect.Intent
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		back, err = sideeffect.GetTx(tx, parked.ID)
		return err
	}))
	require.Equal(t, secretPayload, string(back.Payload))
	require.Equal(t, "ch_secret_result", string(back.Resolution.Result))
	require.Equal(t, got.LastError, back.LastError)
	require.False(t, back.Closed())
	problems, err := db.Check(ctx, sideeffect.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, s := range []string{"4111", "secret-reason", "ch_secret_result"} {
		require.NotContains(t, string(raw), s)
	}
	require.Contains(t, string(raw), "order/1", "subjects stay clear")

	db, err = kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n := 0
		for in, err := range sideeffect.Intents(tx, 0) {
			require.NoError(t, err)
			require.True(t, in.Closed())
			require.True(t, in.Sealed)
			require.Nil(t, in.Payload)
			require.Empty(t, in.LastError)
			n++
		}
		require.Equal(t, 2, n)
		_, err := sideeffect.GetTx(tx, parked.ID)
		require.ErrorIs(t, err, seal.ErrUnknownKey)
		require.ErrorContains(t, err, parked.ID)
		return nil
	}))
	problems, err = db.Check(ctx, sideeffect.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Close())

	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2, 1)})
	require.NoError(t, err)
	total, _ := sealtest.Reseal(t, db, sideeffect.Reseal, 1)
	require.Equal(t, 2, total)
	require.NoError(t, db.Close())
	db, err = kv.Open(path, &kv.Options{ReadOnly: true, Cipher: sealtest.Ring(t, 2)})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		in, err := sideeffect.GetTx(tx, parked.ID)
		require.NoError(t, err)
		require.Equal(t, uint32(2), in.KeyID)
		require.Equal(t, secretPayload, string(in.Payload))
		require.Equal(t, "dashboard says charged: secret-reason", in.Resolution.Reason)
		return nil
	}))
	problems, err = db.Check(ctx, sideeffect.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}
