package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// The ledger as a register per key, for porcupine: a key is claimed with
// increasing versions, completed once with the body of the claim that held
// the current version, and replayed with that body ever after; Do executes
// at most once per key and replays the winner's body.

type lInput struct {
	op   string // "claim", "complete", "do"
	key  string
	ver  uint64 // complete
	body string // complete, do
}

type lOutput struct {
	kind string // claimed, replay, inprogress, ok, lost, executed, unknown
	ver  uint64
	body string
}

type lState struct {
	ver  uint64
	done bool
	body string
}

// ledgerModel is nondeterministic for one outcome: "unknown", a call
// that failed without saying whether its commit happened (the replica was
// closed under it: a crash; or etcd's answer to the commit was lost). Such
// a call may have taken effect or not, at any time after it began
// (recorded with no return), and the model follows both.
var ledgerModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(lInput).key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{lState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(lState), input.(lInput), output.(lOutput)
		if out.kind == "unknown" {
			if next, changed := applied(s, in); changed {
				return []any{s, next}
			}
			return []any{s}
		}
		if ok, next := step(s, in, out); ok {
			return []any{next}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%+v -> %+v", input, output)
	},
}).ToModel()

// applied is the state after in, had it succeeded, and whether it changes
// anything.
func applied(s lState, in lInput) (lState, bool) {
	switch {
	case s.done:
		return s, false // a replay
	case in.op == "do":
		return lState{done: true, body: in.body, ver: s.ver + 1}, true
	case in.op == "claim":
		return lState{ver: s.ver + 1}, true
	case in.op == "complete" && in.ver == s.ver:
		return lState{done: true, body: in.body, ver: s.ver}, true
	}
	return s, false // a stale completion
}

// step is the deterministic model of the outcomes a call reported.
func step(s lState, in lInput, out lOutput) (bool, lState) {
	switch in.op {
	case "claim":
		switch out.kind {
		case "claimed":
			if !s.done && out.ver == s.ver+1 {
				s.ver = out.ver
				return true, s
			}
		case "replay":
			return s.done && out.body == s.body, s
		case "inprogress":
			return !s.done && s.ver > 0, s
		}
	case "complete":
		switch out.kind {
		case "ok":
			if !s.done && in.ver == s.ver {
				s.done, s.body = true, in.body
				return true, s
			}
		case "lost": // a stale version is rejected
			return s.done || in.ver != s.ver, s
		}
	case "do":
		switch out.kind {
		case "executed":
			if !s.done {
				s.done, s.body, s.ver = true, in.body, s.ver+1
				return true, s
			}
		case "replay":
			return s.done && out.body == s.body, s
		}
	}
	return false, s
}

// TestLedgerIsLinearizable records the history of concurrent duplicate
// requests — single-transaction Do and two-phase Claim/Complete with a
// lease short enough that claims are taken over and completions go stale —
// across three crashes (the database closed under running requests and
// reopened by a new incarnation), and checks it with porcupine: one winner
// per key, replays equal the first response, stale versions rejected.
//
// On a backend with several writers (the etcd test matrix) the clients are
// spread over three replicas of the ledger — three handles on one store —
// and the crashes restart one replica at a time.
func TestLedgerIsLinearizable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lin.db")
	replicas, lease := 1, 2*time.Millisecond
	if kvtest.Remote() {
		replicas, lease = 3, 20*time.Millisecond // every call is a few network round trips
	}
	open := func() *ledger.Ledger { return openLin(t, path, lease) }
	cur := make([]atomic.Pointer[ledger.Ledger], replicas)
	for i := range cur {
		cur[i].Store(open())
	}

	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in lInput, call int64, out lOutput) {
		ret := time.Now().UnixNano()
		if out.kind == "unknown" {
			ret = math.MaxInt64 // it may take effect at any time after its call
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	var errSeen atomic.Value
	var progress atomic.Int64
	ctx := context.Background()
	const clients, opsPerClient = 8, 150
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 99))
			for i := range opsPerClient {
				progress.Add(1)
				l := cur[c%replicas].Load()
				body := fmt.Sprintf("c%d-%d", c, i)
				if rng.IntN(3) == 0 {
					key := fmt.Sprintf("do-%d-%d", i/10, rng.IntN(4))
					in := lInput{op: "do", key: key, body: body}
					call := time.Now().UnixNano()
					res, err := l.Do(ctx, ledger.Request{Scope: "s|POST /do", Key: key, Fingerprint: ledger.Fingerprint{1}},
						func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201, Body: []byte(body)}, nil })
					out := lOutput{kind: "unknown"} // a crash under it: committed or not
					switch {
					case err == nil && res.Replayed:
						out = lOutput{kind: "replay", body: string(res.Response.Body)}
					case err == nil:
						out = lOutput{kind: "executed", body: string(res.Response.Body)}
					case errors.Is(err, ledger.ErrInProgress):
						continue // a do never meets a claim on its keys
					case errors.Is(err, kv.ErrClosed):
						time.Sleep(time.Millisecond)
					}
					record(c, in, call, out)
					continue
				}
				key := fmt.Sprintf("2p-%d-%d", i/10, rng.IntN(4))
				in := lInput{op: "claim", key: key}
				call := time.Now().UnixNano()
				o, err := l.Claim(ctx, ledger.Request{Scope: "s|POST /2p", Key: key, Fingerprint: ledger.Fingerprint{2}})
				var ip *ledger.InProgressError
				switch {
				case err == nil && o.Replay != nil:
					record(c, in, call, lOutput{kind: "replay", body: string(o.Replay.Response.Body)})
					continue
				case err == nil:
					record(c, in, call, lOutput{kind: "claimed", ver: o.Claim.Version})
				case errors.As(err, &ip):
					record(c, in, call, lOutput{kind: "inprogress"})
					continue
				default: // a crash under it (kv.ErrClosed): the claim committed or not
					if !errors.Is(err, kv.ErrClosed) {
						errSeen.Store(err.Error())
					}
					record(c, in, call, lOutput{kind: "unknown"})
					time.Sleep(time.Millisecond)
					continue
				}
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(3)) * lease / 2) // sometimes past the lease
				}
				l = cur[c%replicas].Load()
				cin := lInput{op: "complete", key: key, ver: o.Claim.Version, body: body}
				call = time.Now().UnixNano()
				_, err = l.Complete(ctx, o.Claim, ledger.Response{Status: 200, Body: []byte(body)}, nil)
				out := lOutput{kind: "unknown"} // a crash under it: committed or not
				switch {
				case err == nil:
					out = lOutput{kind: "ok"}
				case errors.Is(err, ledger.ErrLeaseLost):
					out = lOutput{kind: "lost"}
				}
				record(c, cin, call, out)
			}
		})
	}
	// Three crashes while the clients run.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for k := 1; k <= 3; k++ {
		for progress.Load() < int64(k*clients*opsPerClient/4) {
			select {
			case <-done:
			case <-time.After(time.Millisecond):
				continue
			}
			break
		}
		r := &cur[k%replicas]
		r.Store(open2(t, path, r.Load(), lease))
	}
	<-done
	// Whatever the scheduling did above, one stale completion for certain:
	// client 0 claims, its lease runs out, client 1 takes the key over, and
	// client 0's completion must be rejected.
	{
		l := cur[0].Load()
		req := ledger.Request{Scope: "s|POST /2p", Key: "stale-for-certain", Fingerprint: ledger.Fingerprint{2}}
		call := time.Now().UnixNano()
		o, err := l.Claim(ctx, req)
		require.NoError(t, err)
		record(0, lInput{op: "claim", key: req.Key}, call, lOutput{kind: "claimed", ver: o.Claim.Version})
		time.Sleep(lease + 3*time.Millisecond) // past the lease
		call = time.Now().UnixNano()
		o2, err := l.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, o2.Claim.Takeover)
		record(1, lInput{op: "claim", key: req.Key}, call, lOutput{kind: "claimed", ver: o2.Claim.Version})
		call = time.Now().UnixNano()
		_, err = l.Complete(ctx, o.Claim, ledger.Response{Status: 200, Body: []byte("stale")}, nil)
		require.ErrorIs(t, err, ledger.ErrLeaseLost)
		record(0, lInput{op: "complete", key: req.Key, ver: o.Claim.Version, body: "stale"}, call, lOutput{kind: "lost"})
	}
	for i := range cur {
		require.NoError(t, cur[i].Load().DB().Close())
	}

	kinds := map[string]int{}
	for _, op := range history {
		kinds[op.Output.(lOutput).kind]++
	}
	t.Logf("history: %d operations %v (an error: %v)", len(history), kinds, errSeen.Load())
	res := porcupine.CheckOperationsTimeout(ledgerModel, history, time.Minute)
	require.Equal(t, porcupine.Ok, res, "the ledger's history is not linearizable")
	require.Positive(t, kinds["lost"], "stale completions happened and were rejected")
	require.Positive(t, kinds["replay"])
}

// open2 closes the old handle (a crash: requests in flight fail) and opens
// the file again, as a restarted process would.
func open2(t *testing.T, path string, old *ledger.Ledger, lease time.Duration) *ledger.Ledger {
	require.NoError(t, old.DB().Close())
	return openLin(t, path, lease)
}

// openLin opens a ledger on the file at path, or, in the etcd test matrix,
// on the remote store of that name (another replica when it is open
// already).
func openLin(t *testing.T, path string, lease time.Duration) *ledger.Ledger {
	var db *kv.DB
	var err error
	if kvtest.Remote() {
		var b kv.Backend
		if b, err = kvtest.RemoteBackend(os.Getenv(kvtest.EnvRemote), path); err == nil {
			db, err = kv.New(b, &kv.Options{NoSync: true})
		}
	} else {
		db, err = kv.Open(path, &kv.Options{NoSync: true})
	}
	require.NoError(t, err)
	l, err := ledger.New(db, &ledger.Config{Lease: lease, Retention: time.Hour})
	require.NoError(t, err)
	return l
}

// The model is not vacuous: two executions of one key, a replay of another
// body, and a stale completion accepted are each rejected.
func TestLedgerModelRejectsViolations(t *testing.T) {
	t.Parallel()
	op := func(c int, call, ret int64, in lInput, out lOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	bad := [][]porcupine.Operation{
		{op(0, 0, 1, lInput{op: "do", key: "k", body: "a"}, lOutput{kind: "executed", body: "a"}),
			op(1, 2, 3, lInput{op: "do", key: "k", body: "b"}, lOutput{kind: "executed", body: "b"})},
		{op(0, 0, 1, lInput{op: "do", key: "k", body: "a"}, lOutput{kind: "executed", body: "a"}),
			op(1, 2, 3, lInput{op: "do", key: "k", body: "b"}, lOutput{kind: "replay", body: "b"})},
		{op(0, 0, 1, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 1}),
			op(1, 2, 3, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 2}),
			op(0, 4, 5, lInput{op: "complete", key: "k", ver: 1, body: "a"}, lOutput{kind: "ok"})},
	}
	for i, h := range bad {
		require.False(t, porcupine.CheckOperations(ledgerModel, h), "violation %d accepted", i)
	}
	good := []porcupine.Operation{
		op(0, 0, 1, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 1}),
		op(1, 2, 3, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 2}),
		op(0, 4, 5, lInput{op: "complete", key: "k", ver: 1, body: "a"}, lOutput{kind: "lost"}),
		op(1, 6, 7, lInput{op: "complete", key: "k", ver: 2, body: "b"}, lOutput{kind: "ok"}),
		op(2, 8, 9, lInput{op: "claim", key: "k"}, lOutput{kind: "replay", body: "b"}),
	}
	require.True(t, porcupine.CheckOperations(ledgerModel, good))

	// A call that failed under a crash may have committed, or not, at any
	// time after it began: both continuations are accepted, and nothing
	// it could not have done.
	const never = math.MaxInt64
	unknownDo := op(0, 0, never, lInput{op: "do", key: "k", body: "a"}, lOutput{kind: "unknown"})
	unknownClaim := op(0, 0, never, lInput{op: "claim", key: "k"}, lOutput{kind: "unknown"})
	for i, h := range [][]porcupine.Operation{
		{unknownDo, op(1, 2, 3, lInput{op: "do", key: "k", body: "b"}, lOutput{kind: "replay", body: "a"})},
		{unknownDo, op(1, 2, 3, lInput{op: "do", key: "k", body: "b"}, lOutput{kind: "executed", body: "b"})},
		{unknownClaim, op(1, 2, 3, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 2})},
		{unknownClaim, op(1, 2, 3, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 1})},
	} {
		require.True(t, porcupine.CheckOperations(ledgerModel, h), "possible outcome %d of an unknown call rejected", i)
	}
	for i, h := range [][]porcupine.Operation{
		{unknownDo, op(1, 2, 3, lInput{op: "do", key: "k", body: "b"}, lOutput{kind: "replay", body: "c"})},
		{unknownClaim, op(1, 2, 3, lInput{op: "claim", key: "k"}, lOutput{kind: "claimed", ver: 3})},
		{op(1, 0, 1, lInput{op: "do", key: "k", body: "b"}, lOutput{kind: "executed", body: "b"}), unknownDo,
			op(2, 2, 3, lInput{op: "do", key: "k", body: "c"}, lOutput{kind: "replay", body: "a"})},
	} {
		require.False(t, porcupine.CheckOperations(ledgerModel, h), "impossible outcome %d of an unknown call accepted", i)
	}
}
