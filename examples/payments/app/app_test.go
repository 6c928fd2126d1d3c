package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/sideeffect"
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

	var events []sideeffect.Event
	require.NoError(t, a.DB.View(context.Background(), func(tx kv.Tx) error {
		for e, err := range sideeffect.Events(tx, sideeffect.EventPending) {
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
