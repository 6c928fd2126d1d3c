package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
)

// A backup taken through the admin endpoint while clients pay, restored
// after they are done: the service comes back as it was at the copy, and
// clients that send every request again with the same keys get every
// order paid with the charge they got the first time. Orders created
// after the copy are created again (under new IDs) and their payments
// reach the provider with the same downstream key (the order's external
// reference): one charge per order at the provider, none twice.
func TestRestoreFromABackupChargesOnce(t *testing.T) {
	t.Parallel()
	const tok = "backup-test-token"
	const clients, orders = 4, 6
	dir := t.TempDir()
	prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", dir+"/provider.db", "-lose-rate", "0.2", "-seed", "5")
	startService := func() (svc *proc, api, admin string) {
		svc = start(t, "payments", "-addr", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-admin-token", tok,
			"-db", dir+"/payments.db", "-provider", prov.url)
		admin = svc.url // the admin endpoint announces itself first
		_, rest, _ := strings.Cut(svc.waitLine(t, "payments listening on "), "listening on ")
		return svc, strings.Fields(rest)[0], admin
	}
	svc, api, admin := startService()

	// pay creates the order ref and pays it, sending each request until
	// it gets a final answer (a lost provider answer is a 502 or 503 for
	// a while), and returns the order's ID and its charge.
	pay := func(api, ref string) (orderID, chargeID string) {
		send := func(path, key, body string) reply { return untilFinal(t, api+path, key, body) }
		o := send("/v1/orders", "create-"+ref, orderBody(ref, 100, "t"))
		if o.Status != 201 && o.Status != 200 {
			t.Errorf("create %s: %d %s", ref, o.Status, o.Body)
			return "", ""
		}
		id := o.json(t)["id"].(string)
		p := send("/v1/orders/"+id+"/pay", "pay-"+ref, "")
		if p.Status != 200 {
			t.Errorf("pay %s: %d %s", ref, p.Status, p.Body)
			return id, ""
		}
		return id, p.json(t)["charge_id"].(string)
	}
	everyone := func(api string, paid *atomic.Int32) map[string]string {
		var mu sync.Mutex
		charged := map[string]string{}
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := range orders {
					ref := fmt.Sprintf("backup-%d-%d", c, i)
					_, ch := pay(api, ref)
					mu.Lock()
					charged[ref] = ch
					mu.Unlock()
					paid.Add(1)
				}
			})
		}
		wg.Wait()
		return charged
	}

	// The backup, halfway through the payments.
	var paid atomic.Int32
	firstDone := make(chan map[string]string, 1)
	go func() { firstDone <- everyone(api, &paid) }()
	for paid.Load() < clients*orders/2 {
		time.Sleep(5 * time.Millisecond)
	}
	copyPath := filepath.Join(dir, "backup.db")
	f, err := os.Create(copyPath)
	require.NoError(t, err)
	n, err := (&inspect.Client{BaseURL: admin, Token: tok}).Backup(context.Background(), f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Positive(t, n)
	first := <-firstDone
	require.Len(t, first, clients*orders)

	// The copy is clean, and earlier than the end.
	db, err := kv.Open(copyPath, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	in, err := inspect.New(db)
	require.NoError(t, err)
	problems, err := in.Check(context.Background())
	require.NoError(t, err)
	require.Empty(t, problems)
	st, err := in.Stats(context.Background())
	require.NoError(t, err)
	require.NoError(t, db.Close())
	inCopy := st.Counts["intent.succeeded"]
	require.Less(t, inCopy, clients*orders, "payments went on after the copy")
	t.Logf("the copy holds %d of the %d payments", inCopy, clients*orders)

	// Restore: the service stopped, the copy in its file's place.
	svc.stop(t)
	require.NoError(t, os.Rename(copyPath, dir+"/payments.db"))
	_, api, _ = startService()
	var again atomic.Int32
	second := everyone(api, &again)
	require.Equal(t, first, second, "every order paid with its first charge")

	byKey := map[string]int{}
	for _, ch := range charges(t, prov.url) {
		byKey[ch.IdempotencyKey]++
	}
	require.Len(t, byKey, clients*orders, "one charge per order")
	for k, n := range byKey {
		require.Equal(t, 1, n, "key %s charged twice", k)
	}
}
