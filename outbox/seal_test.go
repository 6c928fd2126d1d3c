package outbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// Sealed payloads: the relay publishes them opened, whether the event is
// published at once, after a failed attempt, or after quarantine and
// requeue; the file holds none of them; without the key events list
// Closed and the relay refuses to publish (never an empty payload); a
// payload moved to another event fails to open; Reseal moves all three
// buckets to a new key.
func TestSealedPayloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	ob := outbox.New(db)
	payload := func(id string) []byte { return []byte(`{"secret":"payload-of-` + id + `"}`) }
	for _, id := range []string{"ok", "poison", "later"} {
		_, _, err := ob.Add(ctx, outbox.Event{ID: id, Topic: "t", Payload: payload(id)})
		require.NoError(t, err)
	}
	var got []outbox.Event
	failing := true
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{MaxAttempts: 1, Publisher: outbox.PublishFunc(func(_ context.Context, ev outbox.Event) error {
		if ev.ID == "poison" && failing {
			return errors.New("broker rejects it")
		}
		got = append(got, ev)
		return nil
	})})
	require.NoError(t, err)
	_, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.NoError(t, ob.Requeue(ctx, "poison")) // quarantined, then requeued: the sealed bytes moved twice
	failing = false
	_, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, ev := range got {
		require.Equal(t, string(payload(ev.ID)), string(ev.Payload))
		require.True(t, ev.Sealed)
	}
	_, _, err = ob.Add(ctx, outbox.Event{ID: "pending", Topic: "t", Payload: payload("pending")})
	require.NoError(t, err)
	problems, err := db.Check(ctx, outbox.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "payload-of-")

	// Without the key: listed Closed; the relay publishes nothing.
	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for _, st := range []outbox.EventState{outbox.EventPending, outbox.EventPublished} {
			for ev, err := range outbox.Events(tx, st) {
				require.NoError(t, err)
				require.True(t, ev.Closed())
				require.Nil(t, ev.Payload)
				require.Equal(t, uint32(1), ev.KeyID)
			}
		}
		return nil
	}))
	blind, err := outbox.NewRelay(outbox.New(db), &outbox.RelayConfig{Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error {
		t.Fatal("published an event whose payload it could not open")
		return nil
	})})
	require.NoError(t, err)
	_, err = blind.RunOnce(ctx)
	require.ErrorIs(t, err, seal.ErrUnknownKey)
	require.ErrorContains(t, err, `"pending"`)
	require.NoError(t, db.Close())

	// Rotation across pending, published and quarantined.
	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2, 1)})
	require.NoError(t, err)
	total, _ := sealtest.Reseal(t, db, outbox.Reseal, 1)
	require.Equal(t, 4, total)
	require.NoError(t, db.Close())
	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2)})
	require.NoError(t, err)
	problems, err = db.Check(ctx, outbox.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Close())

	// A payload copied onto another event does not open there.
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		pub := tx.Bucket([]byte("\x00oncekv/outbox.published"))
		c := pub.Cursor()
		_, v1 := c.First()
		k2, _ := c.Next()
		require.NotNil(t, k2)
		return pub.Put(append([]byte(nil), k2...), append([]byte(nil), v1...))
	}))
	require.NoError(t, b.Close())
	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2)})
	require.NoError(t, err)
	defer db.Close()
	problems, err = db.Check(ctx, outbox.RecordKind)
	require.NoError(t, err)
	var unopened int
	for _, p := range problems {
		if strings.Contains(p.Message, "sealed payload does not open") && strings.Contains(p.Message, "does not authenticate") {
			unopened++
		}
	}
	require.Equal(t, 1, unopened, "%v", problems)
}
