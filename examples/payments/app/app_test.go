package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// The order.paid event is committed with the status change: whenever the
// order is paid, the event exists, and it carries the paid order.
func TestPaidOrderHasItsEvent(t *testing.T) {
	a, err := New(Config{DBPath: filepath.Join(t.TempDir(), "p.db"), Provider: providertest.New(providertest.Rates{}, 1), NoSync: true})
	require.NoError(t, err)
	defer a.Close()
	srv := httptest.NewServer(a.Handler)
	defer srv.Close()
	post := func(path, key, body string) map[string]any {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_acme")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return m
	}
	o := post("/v1/orders", "c1", `{"external_ref":"x","amount_cents":10,"currency":"eur"}`)
	id := o["id"].(string)
	require.Equal(t, "paid", post("/v1/orders/"+id+"/pay", "p1", "")["status"])

	var events []outbox.Event
	require.NoError(t, a.DB.View(context.Background(), func(tx kv.Tx) error {
		events = nil // a read may run more than once
		for e, err := range outbox.Events(tx, outbox.EventPending) {
			require.NoError(t, err)
			events = append(events, *e)
		}
		return nil
	}))
	require.Len(t, events, 1)
	require.Equal(t, "order.paid/"+id, events[0].ID)
	var payload View
	require.NoError(t, json.Unmarshal(events[0].Payload, &payload))
	require.Equal(t, "paid", payload.Status)
	require.Equal(t, "ch_0001", payload.ChargeID)
}

// Paying an order that is no longer pending once the retention of its charge
// intent has passed re-sent the charge under a new key (issue 13, item 15):
// it answers 409 now. While the intent is retained, the outcome is answered
// from it.
func TestPayOnAPaidOrderAfterRetentionIs409(t *testing.T) {
	clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	fake := providertest.New(providertest.Rates{}, 1)
	a, err := New(Config{DBPath: filepath.Join(t.TempDir(), "p.db"), Provider: fake, NoSync: true, Clock: clock})
	require.NoError(t, err)
	defer a.Close()
	srv := httptest.NewServer(a.Handler)
	defer srv.Close()
	post := func(path, key, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_acme")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
		return resp.StatusCode, m
	}
	_, o := post("/v1/orders", "c1", `{"external_ref":"x","amount_cents":10,"currency":"eur"}`)
	id := o["id"].(string)
	code, paid := post("/v1/orders/"+id+"/pay", "p1", "")
	require.Equal(t, 200, code)
	code, again := post("/v1/orders/"+id+"/pay", "p1-new-key", "")
	require.Equal(t, 200, code, "the intent is retained: its outcome is the answer")
	require.Equal(t, paid["charge_id"], again["charge_id"])

	clock.Advance(31 * 24 * time.Hour) // past sideeffect.DefaultFinishedRetention
	code, late := post("/v1/orders/"+id+"/pay", "p1-after-retention", "")
	require.Equal(t, 409, code, "%v", late)
	require.Contains(t, late["type"], "order-not-payable")
	require.Contains(t, late["detail"], "paid")
	require.Len(t, fake.Charges(), 1)
	require.Len(t, fake.Log(), 1, "the provider was called once")
}

func TestParseAPIKeysRefusesAmbiguity(t *testing.T) {
	_, err := ParseAPIKeys("sk_a=acme,sk_a=globex")
	require.ErrorContains(t, err, `api key "sk_a" is listed twice`)
	_, err = ParseAPIKeys("sk_a=ac|me")
	require.ErrorContains(t, err, "scope separator")
	keys, err := ParseAPIKeys("sk_a=acme, sk_b=globex")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"sk_a": "acme", "sk_b": "globex"}, keys)
}

// GET /livez, without an API key, is 200 while the database serves and
// 503 once it refuses calls (here closed; kv.ErrSyncFailed alike).
func TestLivenessFollowsTheDatabase(t *testing.T) {
	a, err := New(Config{DBPath: filepath.Join(t.TempDir(), "p.db"), Provider: providertest.New(providertest.Rates{}, 1), NoSync: true})
	require.NoError(t, err)
	defer a.Close()
	srv := httptest.NewServer(a.Handler)
	defer srv.Close()
	get := func() (int, string) {
		resp, err := http.Get(srv.URL + "/livez")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get()
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, a.DB.Close())
	code, body = get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "database is closed")
}
