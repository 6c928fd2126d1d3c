package command

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// TestMain doubles as a running service for the locked-file test: with
// HOLD_DB set, the binary opens that database, serves its admin endpoint,
// prints "ready URL" and runs until stdin closes.
func TestMain(m *testing.M) {
	if enc := os.Getenv("RUN_CLI"); enc != "" { // the CLI as a process of its own (JSON args), to be killed
		var args []string
		if err := json.Unmarshal([]byte(enc), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(Main(args, os.Stdout, os.Stderr))
	}
	if path := os.Getenv("HOLD_DB"); path != "" {
		db, err := kv.Open(path, nil)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go func() {
			h, err := inspect.Handler(db, inspect.HandlerOptions{Token: os.Getenv("HOLD_TOKEN")})
			if err != nil {
				panic(err)
			}
			_ = http.Serve(ln, h)
		}()
		fmt.Println("ready http://" + ln.Addr().String())
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = db.Close()
		os.Exit(0)
	}
	// The etcd tests' embedded members end their peer connections a
	// few seconds after they close.
	kvtest.RunWithoutLeaks(m, 15*time.Second)
}

// run runs the CLI in-process.
func run(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return out.String(), errb.String(), code
}

// fixture builds a database with records of every kind, through the
// library, and returns its path. The CLI reads it with the wall clock, so
// the fixture's clock is set relative to now: old-1 expired 90 minutes
// ago, the other records expire in 30 minutes.
func fixture(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fixture.db")
	clock := kvtest.NewManualClock(time.Now().Add(-150 * time.Minute))
	db, err := kv.Open(path, &kv.Options{Clock: clock, NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	populate(t, db, clock)
	return path
}

// populate writes the fixture's records into db, whose clock is clock.
func populate(t testing.TB, db *kv.DB, clock *kvtest.ManualClock) {
	t.Helper()
	ctx := context.Background()
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour, Lease: time.Minute})
	do := func(scope, key string, status int, body []byte) {
		_, err := l.Do(ctx, ledger.Request{Scope: scope, Key: key, Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: status, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}, nil
		})
		require.NoError(t, err)
	}
	do("acme|POST /v1/orders", "old-1", 201, []byte(`{"id":"ord_old"}`)) // expires at t0+1h
	clock.Advance(2 * time.Hour)
	do("acme|POST /v1/orders", "create-1", 201, []byte(`{"id":"ord_1"}`))
	do("acme|POST /v1/orders", "create-2", 200, []byte(`{"id":"ord_2"}`))
	do("globex|POST /v1/orders", "create-1", 201, []byte{0x00, 0xff, 0x10})
	_, err := l.Claim(ctx, ledger.Request{Scope: "acme|POST /v1/orders/{id}/pay", Key: "pay-1", Fingerprint: ledger.Fingerprint{2}})
	require.NoError(t, err)

	in, _ := inbox.New(db, nil)
	for _, c := range []string{"billing", "analytics"} {
		_, err := in.Handle(ctx, c, "msg-1", func(kv.Tx) error { return nil })
		require.NoError(t, err)
	}

	ob := outbox.New(db)
	for _, id := range []string{"ev-1", "ev-poison", "ev-3"} {
		_, _, err := ob.Add(ctx, outbox.Event{ID: id, Topic: "order.paid"})
		require.NoError(t, err)
	}
	relay, _ := outbox.NewRelay(ob, &outbox.RelayConfig{MaxAttempts: 1,
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			if e.ID == "ev-poison" {
				return fmt.Errorf("broker rejects %s", e.ID)
			}
			return nil
		})})
	_, err = relay.RunOnce(ctx) // ev-1 published, ev-poison quarantined, ev-3 published
	require.NoError(t, err)
	_, _, err = ob.Add(ctx, outbox.Event{ID: "ev-pending", Topic: "order.created"})
	require.NoError(t, err)

	fake := providertest.New(providertest.Rates{}, 1)
	x, _ := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: fake}}, MaxAttempts: 1})
	spec := func(k string) sideeffect.Spec {
		return sideeffect.Spec{Kind: "charge", Subject: "order/" + k, Scope: "acme", Key: k, Purpose: "charge"}
	}
	i1, _, _ := x.Create(ctx, spec("ord_1"))
	_, err = x.Execute(ctx, i1.ID)
	require.NoError(t, err)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	i2, _, _ := x.Create(ctx, spec("ord_2"))
	_, err = x.Execute(ctx, i2.ID) // parked: needs_attention
	require.NoError(t, err)
	_, _, err = x.Create(ctx, spec("ord_3")) // pending
	require.NoError(t, err)

	type order struct{ Ref string }
	tbl, _ := conditional.NewTable(db, "orders", &conditional.Options[order]{Indexes: []conditional.Index[order]{
		{Name: "by_ref", Key: func(o order) ([]byte, bool) { return []byte(o.Ref), true }}}})
	_, err = tbl.Insert(ctx, "ord_1", order{Ref: "ext-1"})
	require.NoError(t, err)
}
