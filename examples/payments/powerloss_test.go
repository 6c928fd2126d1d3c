package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv/kvtest"
)

// TestPaymentsUnderPowerLoss cuts the power under the payments service
// while clients create and pay orders through a provider that fails and
// loses answers after charging: the service runs durably on powercut's
// filesystem (kvtest.MountPowerDisk), whose cut loses every write not yet
// synced, which SIGKILL cannot do. The provider is an outside system on a
// disk of its own, and keeps what it was told.
//
// After each cut the service restarts on what the disk held, and every
// request of the cycle is sent again with its key until it is answered:
// a request the clients had an answer for replays that answer byte for
// byte (an order created again would have another ID; a payment whose
// record was lost would run anew). At the end every order is paid once,
// with the charge its client was told of, and the provider holds no
// other charge.
//
// After a cut, every call on the disk fails with EIO until the process is
// killed: a service that reads a page its memory map had not read meets
// kv.ErrReadFailed, answers 503 and exits by itself, as it would on a disk
// that fails its reads.
//
// It needs the powercut program (ONCEKV_POWERCUT, see kvtest.PowercutProgram);
// ONCEKV_CRASH_CYCLES sets twice the number of cuts (6 cuts; make
// powerloss: 50).
func TestPaymentsUnderPowerLoss(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	cycles := 6
	if n, err := strconv.Atoi(os.Getenv("ONCEKV_CRASH_CYCLES")); err == nil && n > 0 {
		cycles = n / 2
	}
	dir := t.TempDir()
	prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "provider.db"), "-lose-rate", "0.3", "-fail-rate", "0.1", "-seed", "13")
	state := filepath.Join(dir, "state-0")
	require.NoError(t, os.Mkdir(state, 0o700))
	rng := rand.New(rand.NewPCG(13, 14))

	const clients, perClient = 3, 2
	answered := map[string]reply{} // a request's key → the answer its client was given
	charged := map[string]string{} // order ID → the charge its client was told of
	var during, early, inCut int
	for c := 1; c <= cycles; c++ {
		mnt := t.TempDir()
		disk := kvtest.MountPowerDisk(t, bin, mnt, state)
		svc := start(t, "payments", "-addr", "127.0.0.1:0", "-db", filepath.Join(mnt, "payments.db"), "-provider", prov.url)
		out := filepath.Join(dir, fmt.Sprintf("state-%d", c))
		cut := kvtest.PlanCut(c, rng, out, 40, 400*time.Millisecond)

		var mu sync.Mutex
		got := map[string]reply{}
		errc := make(chan error, clients)
		// send sends a request until it is answered, and keeps the
		// answer; false once the service is gone.
		send := func(url, key, body string) (reply, bool) {
			r, ok, err := untilAnsweredOrGone(url, key, body)
			if !ok {
				errc <- err
				return r, false
			}
			mu.Lock()
			got[key] = r
			mu.Unlock()
			return r, true
		}
		var wg sync.WaitGroup
		for k := range clients {
			wg.Go(func() {
				for i := range perClient {
					ref := fmt.Sprintf("power-%d-%d-%d", c, k, i)
					o, ok := send(svc.url+"/v1/orders", "create-"+ref, orderBody(ref, 100+i, "t"))
					var order struct{ ID string }
					if !ok || json.Unmarshal([]byte(o.Body), &order) != nil || order.ID == "" {
						return // a bad answer is reported after the restart, which sends it again
					}
					if _, ok := send(svc.url+"/v1/orders/"+order.ID+"/pay", "pay-"+ref, ""); !ok {
						return
					}
				}
			})
		}
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		account, afterEnd, err := disk.CutWhile(cut, ended)
		require.NoError(t, err)
		svc.kill() // the power is gone: so is the process
		<-ended
		disk.Unmount()
		close(errc)
		for err := range errc {
			require.NoError(t, err)
		}
		if !afterEnd {
			inCut++
		}
		if len(got) > 0 {
			during++
		}
		if len(got) < 2*clients*perClient {
			early++
		}
		for k, r := range got {
			answered[k] = r
		}

		// The restart on what the disk held: every request again.
		state = out
		svc = start(t, "payments", "-addr", "127.0.0.1:0", "-db", filepath.Join(state, "payments.db"), "-provider", prov.url)
		again := func(url, key, body string) reply {
			r := untilFinal(t, url, key, body)
			if want, ok := answered[key]; ok {
				require.Equal(t, want.Status, r.Status, "%s was answered before the cut (%s), and answers otherwise after it", key, account)
				require.Equal(t, want.Body, r.Body, "%s was answered before the cut (%s), and answers otherwise after it: the answer was lost", key, account)
				require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"), "%s: a replay", key)
			}
			answered[key] = r
			return r
		}
		for k := range clients {
			for i := range perClient {
				ref := fmt.Sprintf("power-%d-%d-%d", c, k, i)
				o := again(svc.url+"/v1/orders", "create-"+ref, orderBody(ref, 100+i, "t"))
				require.Equal(t, 201, o.Status, "create %s: %s", ref, o.Body)
				id := o.json(t)["id"].(string)
				p := again(svc.url+"/v1/orders/"+id+"/pay", "pay-"+ref, "")
				require.Equal(t, 200, p.Status, "pay %s: %s", ref, p.Body)
				view := p.json(t)
				require.Equal(t, "paid", view["status"], "pay %s", ref)
				charged[id] = view["charge_id"].(string)
			}
		}
		svc.stop(t)
	}

	// One charge per order, the one its client was told of, and no other.
	byOrder := map[string][]string{}
	for _, ch := range charges(t, prov.url) {
		id := strings.TrimPrefix(ch.Subject, "order/")
		byOrder[id] = append(byOrder[id], ch.ID)
	}
	for id, charge := range charged {
		require.Equal(t, []string{charge}, byOrder[id], "order %s: one charge, the one its client was told of", id)
	}
	require.Len(t, byOrder, len(charged), "no charge for an order no client paid")
	t.Logf("%d power cuts, %d while the clients ran, %d after some answers, %d before every request was answered; %d orders, each paid once",
		cycles, inCut, during, early, len(charged))
	require.Positive(t, during, "no cut came after an answer")
	require.Positive(t, early, "no cut came before the clients were done")
}

// untilAnsweredOrGone POSTs to url as acme with the key until it gets a
// final answer (not 409, not 5xx), or the service is gone (a request
// fails: the power was cut and the process killed). Each attempt goes
// twice, the copy up to 4 ms after the first, as a client's retry may
// meet the first attempt's commit; two final answers must be the same.
func untilAnsweredOrGone(url, key, body string) (reply, bool, error) {
	final := func(r reply) bool { return r.Status != 409 && r.Status < 500 }
	for {
		var rs [2]reply
		var errs [2]error
		var wg sync.WaitGroup
		for i := range rs {
			wg.Go(func() {
				if i == 1 {
					time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond) //nolint:gosec // timing dice
				}
				rs[i], errs[i] = try("POST", url, acme, key, body)
			})
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			return reply{}, false, nil
		}
		switch {
		case final(rs[0]) && final(rs[1]) && (rs[0].Status != rs[1].Status || rs[0].Body != rs[1].Body):
			return reply{}, false, fmt.Errorf("%s answered twice, differently: %d %s and %d %s", key, rs[0].Status, rs[0].Body, rs[1].Status, rs[1].Body)
		case final(rs[0]):
			return rs[0], true, nil
		case final(rs[1]):
			return rs[1], true, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// When a commit's sync fails after its meta page was written (a disk that
// failed a write-back: kvtest.PowerDisk.FailSync), the database refuses
// every call: the request is answered 503, /livez too, and the service
// exits by itself with status 1 at once (kv.DB.Done), not when its
// background loops next poll (30 s for the reconciler, a minute for the
// sweeper), for its supervisor to restart it. Restarted on the same disk,
// the client's retry finishes the order, and the payment is charged once.
func TestPaymentsExitWhenASyncFails(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	dir := t.TempDir()
	prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "provider.db"), "-seed", "17")
	mnt := t.TempDir()
	disk := kvtest.MountPowerDisk(t, bin, mnt, t.TempDir())
	args := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(mnt, "payments.db"), "-provider", prov.url}
	svc := start(t, "payments", args...)
	exited := make(chan error, 1)
	go func() { exited <- svc.cmd.Wait() }()

	// A commit syncs twice, its pages and then its meta page: the second
	// sync from now is the create's meta page's, or (the service has just
	// started) the first retention sweep's, with the create behind it,
	// unless bbolt synced a file it grew first. A failed pages' sync
	// leaves nothing written and the database serving, and the create is
	// sent again. (Behind the sweep's failed commit, the create was once
	// answered 201: kv let a write that waited for the writer's turn
	// commit on top of the failed commit.)
	const ref = "syncfail-1"
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 10, "no failed sync made the database refuse calls")
		require.NoError(t, disk.FailSync(2))
		r, err := try("POST", svc.url+"/v1/orders", acme, "create-"+ref, orderBody(ref, 500, "t"))
		require.NoError(t, disk.SyncFailed())
		live, lerr := try("GET", svc.url+"/livez", "", "", "")
		if lerr != nil { // refused, and gone already
			break
		}
		if live.Status == 200 {
			require.NoError(t, err)
			require.NotEqual(t, 201, r.Status, "a create whose commit's sync failed")
			continue
		}
		require.Equal(t, 503, live.Status, live.Body)
		require.Contains(t, live.Body, "refuses every call")
		if err == nil { // its own commit failed, or it came in behind the one that did
			require.Equal(t, 503, r.Status, "a create met the refusal: %s", r.Body)
		}
		break
	}
	select {
	case err := <-exited:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "the service exits with an error")
		require.Equal(t, 1, exit.ExitCode())
	case <-time.After(20 * time.Second):
		t.Fatal("the service did not exit within 20 s of its database refusing calls (its background loops poll every 30 s and every minute)")
	}

	svc = start(t, "payments", args...) // its supervisor's restart: the open reads the disk
	o := untilFinal(t, svc.url+"/v1/orders", "create-"+ref, orderBody(ref, 500, "t"))
	require.Equal(t, 201, o.Status, o.Body)
	id := o.json(t)["id"].(string)
	p := untilFinal(t, svc.url+"/v1/orders/"+id+"/pay", "pay-"+ref, "")
	require.Equal(t, 200, p.Status, p.Body)
	cs := charges(t, prov.url)
	require.Len(t, cs, 1)
	require.Equal(t, "order/"+id, cs[0].Subject)
	svc.stop(t)
	disk.Unmount()
}
