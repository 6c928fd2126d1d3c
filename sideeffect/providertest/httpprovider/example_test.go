package httpprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"
)

// The provider's API on a loopback server, its charges in a bbolt file of
// its own, and the service's Client: a charge sent twice with one key is
// charged once, and Status finds it by the key.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "provider.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	srv := httptest.NewServer(httpprovider.New(db, httpprovider.Faults{}, 1).Handler())
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	client := &httpprovider.Client{BaseURL: srv.URL, HTTP: srv.Client()}
	call := sideeffect.Call{Kind: "charge", Subject: "order/1042", DownstreamKey: "acme-pay-1042",
		Payload: []byte(`{"amount_cents":2500,"currency":"EUR","subject":"order/1042"}`)}
	for range 2 {
		rep, err := client.Do(ctx, call)
		var ch httpprovider.Charge
		_ = json.Unmarshal(rep.Result, &ch)
		fmt.Println("do:", rep.State, ch.ID, ch.AmountCents, err)
	}
	st, err := client.Status(ctx, call)
	fmt.Println("status:", st.State, err)
	st, err = client.Status(ctx, sideeffect.Call{DownstreamKey: "never-sent"})
	fmt.Println("status of another key:", st.State, err)
	// Output:
	// do: succeeded ch_000001 2500 <nil>
	// do: succeeded ch_000001 2500 <nil>
	// status: succeeded <nil>
	// status of another key: not_found <nil>
}
