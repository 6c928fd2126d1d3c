package inspect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

const secret = "4111-1111-1111-1111 Jane Q. Customer"

type account struct {
	Owner string `json:"owner"`
	Card  string `json:"card"`
}

// sealedWorld writes one of every sealed kind under ring: a stored
// response, a parked intent and a succeeded one, an outbox event (one
// published, one pending), a row of a sealed table; and, as the control, a
// row of a table that did not opt in.
func sealedWorld(t *testing.T, path string, r *seal.Ring) (published []outbox.Event) {
	t.Helper()
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: r})
	require.NoError(t, err)
	defer db.Close()
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	_, err = l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/cards", Key: "k1", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 201, Header: map[string][]string{"X-Card": {secret}}, Body: []byte(secret)}, nil
	})
	require.NoError(t, err)

	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: fake}}, MaxAttempts: 1})
	require.NoError(t, err)
	parked, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/1", Key: "1", Purpose: "charge", Payload: []byte(secret)})
	require.NoError(t, err)
	_, err = x.Execute(ctx, parked.ID)
	require.NoError(t, err)
	fake.Script = nil
	ok, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/2", Key: "2", Purpose: "charge", Payload: []byte(secret)})
	require.NoError(t, err)
	got, err := x.Execute(ctx, ok.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, got.State)
	require.NotEmpty(t, got.Result)

	ob := outbox.New(db)
	for _, id := range []string{"card.added/1", "card.added/2"} {
		_, _, err = ob.Add(ctx, outbox.Event{ID: id, Topic: "card.added", Payload: []byte(`{"card":"` + secret + `"}`)})
		require.NoError(t, err)
	}
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: outbox.PublishFunc(func(_ context.Context, ev outbox.Event) error {
		if ev.ID == "card.added/2" {
			return errors.New("broker down") // stays pending, its failure recorded
		}
		published = append(published, ev)
		return nil
	})})
	require.NoError(t, err)
	_, err = relay.RunOnce(ctx)
	require.NoError(t, err)

	sealedTable, err := conditional.NewTable(db, "accounts", &conditional.Options[account]{Seal: true})
	require.NoError(t, err)
	_, err = sealedTable.Insert(ctx, "acct-1", account{Owner: "jane", Card: secret})
	require.NoError(t, err)
	clearTable, err := conditional.NewTable[account](db, "public", nil)
	require.NoError(t, err)
	_, err = clearTable.Insert(ctx, "p-1", account{Owner: "clear-table-value"})
	require.NoError(t, err)

	problems, err := db.Check(ctx, inspect.Checkers()...)
	require.NoError(t, err)
	require.Empty(t, problems)
	return published
}

func intentIDs() (parked, succeeded string) {
	return sideeffect.DownstreamKey("", "1", "charge"), sideeffect.DownstreamKey("", "2", "charge")
}

// Round trip of every sealed kind; the file reveals none of it; a tool
// without the key shows statuses, sizes and "encrypted (key id N)"; the
// check verifies every value opens with the supplied keys.
func TestEverySealedKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sealed.db")
	published := sealedWorld(t, path, sealtest.Ring(t, 1))
	require.Len(t, published, 1)
	require.JSONEq(t, `{"card":"`+secret+`"}`, string(published[0].Payload), "the relay publishes the opened payload")

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), secret, "no stored body, payload, result or sealed row is readable in the file")
	require.NotContains(t, string(raw), "4111")
	require.Contains(t, string(raw), "clear-table-value", "control: a table that did not opt in is in clear")
	require.Contains(t, string(raw), "acme|POST /v1/cards", "scopes and keys stay clear (documented)")

	// With the key: everything reads back.
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	l, _ := ledger.New(db, nil)
	rec, err := l.Get(ctx, "acme|POST /v1/cards", "k1")
	require.NoError(t, err)
	require.Equal(t, secret, string(rec.Response.Body))
	require.Equal(t, secret, rec.Response.Header.Get("X-Card"))
	parkedID, okID := intentIDs()
	var parked, succeeded *sideeffect.Intent
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		parked, err = sideeffect.GetTx(tx, parkedID)
		require.NoError(t, err)
		succeeded, err = sideeffect.GetTx(tx, okID)
		return err
	}))
	require.Equal(t, secret, string(parked.Payload))
	require.Equal(t, sideeffect.StateNeedsAttention, parked.State)
	require.NotEmpty(t, parked.LastError)
	require.NotEmpty(t, succeeded.Result)
	require.True(t, parked.Sealed && succeeded.Sealed && !parked.Closed())
	accounts, err := conditional.NewTable(db, "accounts", &conditional.Options[account]{Seal: true})
	require.NoError(t, err)
	row, err := accounts.Get(ctx, "acct-1")
	require.NoError(t, err)
	require.Equal(t, secret, row.Value.Card)
	var pending []*outbox.Event
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		pending = nil
		for ev, err := range outbox.Events(tx, outbox.EventPending) {
			require.NoError(t, err)
			pending = append(pending, ev)
		}
		return nil
	}))
	require.Len(t, pending, 1)
	require.Equal(t, "broker down", pending[0].LastError)
	require.JSONEq(t, `{"card":"`+secret+`"}`, string(pending[0].Payload), "kept sealed through the failed attempt")
	require.NoError(t, db.Close())

	// Without the key.
	db, err = kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer func() { _ = db.Close() }() // the last one opened: db is opened again below
	ins := must(inspect.New(db))
	ins.ShowBodies = true
	keys, err := ins.Keys(ctx, inspect.KeysQuery{})
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "key id 1", keys[0].Encrypted)
	require.Equal(t, 201, keys[0].ResponseStatus)
	got, err := ins.Get(ctx, "acme|POST /v1/cards", "k1", true)
	require.NoError(t, err)
	require.Equal(t, "encrypted (key id 1)", got.Body)
	require.Equal(t, "encrypted", got.BodyEncoding)
	intents, err := ins.Intents(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, intents, 2)
	for _, in := range intents {
		require.Equal(t, "encrypted (key id 1)", in.Payload, "never garbage, never empty as if stored so")
		require.Equal(t, "key id 1", in.Encrypted)
	}
	o, err := ins.Outbox(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, o.Pending)
	require.Equal(t, "key id 1", o.OldestPending[0].Encrypted)
	problems, err := db.Check(ctx, inspect.Checkers()...)
	require.NoError(t, err)
	require.Empty(t, problems, "without keys nothing can be verified, and nothing is called damaged")
	l, _ = ledger.New(db, nil)
	_, err = l.Get(ctx, "acme|POST /v1/cards", "k1")
	var oe *seal.OpenError
	require.ErrorAs(t, err, &oe)
	require.ErrorIs(t, err, seal.ErrUnknownKey)
	_, err = conditional.NewTable(db, "accounts", &conditional.Options[account]{Seal: true})
	require.ErrorIs(t, err, conditional.ErrInvalidTable, "Seal needs a key ring")
	plainView, err := conditional.NewTable[account](db, "accounts", nil)
	require.NoError(t, err)
	_, err = plainView.Get(ctx, "acct-1")
	require.ErrorIs(t, err, seal.ErrUnknownKey, "a sealed row opens whatever the table's option, and only with the key")
	require.ErrorContains(t, err, `"acct-1"`)

	// The check with a wrong key file (same ID, other secret) reports every sealed value.
	wrong, err := seal.NewRing(seal.Key{ID: 1})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	db, err = kv.Open(path, &kv.Options{ReadOnly: true, Cipher: wrong})
	require.NoError(t, err)
	problems, err = db.Check(ctx, inspect.Checkers()...)
	require.NoError(t, err)
	require.Len(t, problems, 6, "%v", problems) // response, 2 intents, 2 events, 1 row
	for _, p := range problems {
		require.Contains(t, p.Message, "not open")
		require.Contains(t, p.Message, "does not authenticate")
	}
}

// A sealed value copied onto another record, in the file, fails to open
// there (seal.ErrTampered) instead of answering with the other record's
// data; so does a value with one flipped byte.
func TestSealedSwapAndTamperInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sealed.db")
	sealedWorld(t, path, sealtest.Ring(t, 1))
	parkedID, okID := intentIDs()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		intents := tx.Bucket([]byte("\x00oncekv/intent"))
		require.NotNil(t, intents)
		require.NoError(t, intents.Put([]byte(okID), append([]byte(nil), intents.Get([]byte(parkedID))...)))
		acc := tx.Bucket([]byte("\x00oncekv/table/accounts"))
		require.NotNil(t, acc)
		return acc.Put([]byte("acct-2"), append([]byte(nil), acc.Get([]byte("acct-1"))...))
	}))
	require.NoError(t, b.Close())

	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		_, err := sideeffect.GetTx(tx, okID)
		require.ErrorIs(t, err, seal.ErrTampered)
		require.ErrorContains(t, err, okID)
		in, err := sideeffect.GetTx(tx, parkedID)
		require.NoError(t, err)
		require.Equal(t, secret, string(in.Payload))
		return nil
	}))
	accounts, err := conditional.NewTable(db, "accounts", &conditional.Options[account]{Seal: true})
	require.NoError(t, err)
	_, err = accounts.Get(ctx, "acct-2")
	require.ErrorIs(t, err, seal.ErrTampered)
	problems, err := db.Check(ctx, inspect.Checkers()...)
	require.NoError(t, err)
	var unopened []string
	for _, p := range problems {
		if strings.Contains(p.Message, "not open") {
			unopened = append(unopened, p.Message)
		}
	}
	require.Len(t, unopened, 2, "%v", problems)
	require.Contains(t, unopened[0]+unopened[1], okID)
	require.Contains(t, unopened[0]+unopened[1], "acct-2")
}

// Rekey needs a key ring.
func TestRekeyWithoutKey(t *testing.T) {
	db, err := kv.Open(filepath.Join(t.TempDir(), "plain.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	_, err = inspect.Rekey(ctx, db, inspect.RekeyOptions{})
	require.ErrorIs(t, err, inspect.ErrNoCipher)
}

// Rotation: a ring with a new current key still opens the old values, a
// rekey moves every sealed value to the new key in bounded batches, and
// then the old key can be retired.
func TestRekeyEveryKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sealed.db")
	sealedWorld(t, path, sealtest.Ring(t, 1))
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2, 1)})
	require.NoError(t, err)
	var last inspect.RekeyProgress
	n, err := inspect.Rekey(ctx, db, inspect.RekeyOptions{BatchSize: 1, Progress: func(p inspect.RekeyProgress) { last = p }})
	require.NoError(t, err)
	require.Equal(t, 6, n, "1 response, 2 intents, 2 events, 1 sealed row")
	require.True(t, last.Done)
	require.GreaterOrEqual(t, last.Batches, 6)
	n, err = inspect.Rekey(ctx, db, inspect.RekeyOptions{Progress: func(p inspect.RekeyProgress) { last = p }})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 8, last.Batches, "a batch or two for each kind of sealed values: bbolt takes the whole default batch in one transaction (etcd a quarter of its 128 writes)")
	require.NoError(t, db.Close())

	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2)})
	require.NoError(t, err)
	defer db.Close()
	problems, err := db.Check(ctx, inspect.Checkers()...)
	require.NoError(t, err)
	require.Empty(t, problems, "every value opens with key 2 alone")
	ins := must(inspect.New(db))
	ins.ShowBodies = true
	got, err := ins.Get(ctx, "acme|POST /v1/cards", "k1", true)
	require.NoError(t, err)
	require.Equal(t, secret, got.Body)
	require.Equal(t, "key id 2", got.Encrypted)
	intents, err := ins.Intents(ctx, "", 0)
	require.NoError(t, err)
	for _, in := range intents {
		require.Equal(t, secret, in.Payload)
		require.Equal(t, "key id 2", in.Encrypted)
	}
	accounts, err := conditional.NewTable(db, "accounts", &conditional.Options[account]{Seal: true})
	require.NoError(t, err)
	row, err := accounts.Get(ctx, "acct-1")
	require.NoError(t, err)
	require.Equal(t, secret, row.Value.Card)
}

// The console over an encrypted database opened without its key: the
// record page says the response is encrypted with which key, never shows
// garbage or an empty body as if stored so; with the key it shows the body.
func TestConsoleOnEncryptedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sealed.db")
	sealedWorld(t, path, sealtest.Ring(t, 1))
	for _, withKey := range []bool{false, true} {
		opts := &kv.Options{ReadOnly: true}
		if withKey {
			opts.Cipher = sealtest.Ring(t, 1)
		}
		db, err := kv.Open(path, opts)
		require.NoError(t, err)
		srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token})))
		jar, _ := cookiejar.New(nil)
		admin := &http.Client{Jar: jar}
		base := srv.URL + inspect.ConsolePath
		code, _ := post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
		require.Equal(t, 200, code)
		_, body := page(t, admin, base+"record?scope="+url.QueryEscape("acme|POST /v1/cards")+"&key=k1")
		if withKey {
			require.Contains(t, body, secret)
			require.Contains(t, body, "encrypted with key id 1")
		} else {
			require.NotContains(t, body, secret)
			require.Contains(t, body, "Headers and body are encrypted (key id 1)")
			require.Contains(t, body, "size unknown")
		}
		_, body = page(t, admin, base+"intents")
		if !withKey {
			require.Contains(t, body, "encrypted (key id 1)", "the parked intent's provider error")
		}
		srv.Close()
		require.NoError(t, db.Close())
	}
}
