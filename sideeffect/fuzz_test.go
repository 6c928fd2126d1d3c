package sideeffect_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// countingHandler's completions count their runs in the database, inside
// the finishing transaction: a run that rolled back leaves no count.
func countingHandler(p sideeffect.Provider) sideeffect.Handler {
	count := func(what string) func(tx kv.Tx, in *sideeffect.Intent) error {
		return func(tx kv.Tx, in *sideeffect.Intent) error {
			return kvtest.Increment(tx, "completions", what+" "+in.ID)
		}
	}
	return sideeffect.Handler{Provider: p, OnSucceeded: count("succeeded"), OnFailed: count("failed")}
}

// FuzzIntentsKeepTheProvidersWord plays creates, executions, reconciler
// passes, clock moves, requeues, operator verdicts and restarts against
// the fake provider, whose faults (failing before charging, charging and
// losing the answer, declining, a status it cannot give) come from the
// input. After every step, for every intent: the provider took at most
// one effect for its key and was never sent it again once it had it; every
// send after the first followed a status that said the provider never got
// it; an intent finished succeeded or failed says what the provider says
// (unless an operator said otherwise), and its completion ran exactly once;
// attempts stay within MaxAttempts.
func FuzzIntentsKeepTheProvidersWord(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0})                                     // created, executed: charged
	f.Add([]byte{0, 0, 1, 0, 2, 3, 3, 2, 0})                         // the answer lost; the reconciler asks and finishes it
	f.Add([]byte{0, 0, 1, 0, 1, 3, 3, 2, 0, 0})                      // failed before charging; asked, not found, sent again
	f.Add([]byte{0, 1, 1, 1, 3, 3, 3, 2, 4, 3, 3, 2, 4, 3, 3, 2, 4}) // statuses unknown until parked; then requeued
	f.Add([]byte{0, 2, 1, 2, 2, 5, 2, 6, 0, 2, 0})                   // lost, then an operator's verdict, then a restart
	f.Add([]byte{0, 3, 2, 3, 3, 2, 3, 0})                            // never executed: the reconciler starts it after the grace
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		ctx := context.Background()
		clock := kvtest.NewManualClock(t0)
		path := filepath.Join(t.TempDir(), "se.db")
		opts := &kv.Options{NoSync: true, Clock: clock}
		db := kvtest.OpenPath(t, path, opts, sideeffect.RecordKind)
		fake := providertest.New(providertest.Rates{}, 1)
		input := &kvtest.Input{Data: data}
		next := input.Next
		fake.Script = func(op string, _ sideeffect.Call) providertest.Fault {
			b := next()
			if op == "status" {
				if b%3 == 2 {
					return providertest.StatusUnknown
				}
				return providertest.None
			}
			return [...]providertest.Fault{providertest.None, providertest.FailBeforeCharge, providertest.LoseResponse, providertest.Decline, providertest.None}[b%5]
		}
		const maxAttempts = 3
		cfg := &sideeffect.Config{
			Handlers: map[string]sideeffect.Handler{"charge": countingHandler(fake)},
			Grace:    10 * time.Second, Lease: time.Minute, CallTimeout: 5 * time.Second,
			MaxAttempts: maxAttempts, Concurrency: 1, // one call at a time: the script is read in order
			Backoff: sideeffect.Backoff{Base: time.Second, Cap: 10 * time.Second, Rand: func() float64 { return 0.5 }},
		}
		x, err := sideeffect.New(db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[int]string{}                  // order -> intent ID
		verdict := map[string]sideeffect.State{} // an operator's word, when given
		for step := 0; input.More(); step++ {
			op, order := next()%7, int(next())%4
			id := ids[order]
			what := fmt.Sprintf("step %d: op %d on order %d", step, op, order)
			switch op {
			case 0:
				in, _, err := x.Create(ctx, spec(strconv.Itoa(order)))
				if err != nil {
					t.Fatalf("%s: create: %v", what, err)
				}
				ids[order] = in.ID
			case 1:
				if id != "" {
					_, _ = x.Execute(ctx, id) // pending, backing off, parked, final: each an answer
				}
			case 2:
				if _, err := x.RunOnce(ctx); err != nil {
					t.Fatalf("%s: reconciler pass: %v", what, err)
				}
			case 3:
				clock.Advance(time.Duration(order+1) * 5 * time.Second)
			case 4:
				if id != "" {
					_, _ = x.Requeue(ctx, id)
				}
			case 5:
				if id != "" {
					v := sideeffect.StateSucceeded
					if next()%2 == 1 {
						v = sideeffect.StateFailed
					}
					before, err := x.Get(ctx, id)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					_, err = x.Resolve(ctx, id, v, []byte("by hand"), "checked the dashboard")
					switch {
					case before.State.Final() && !errors.Is(err, sideeffect.ErrAlreadyFinal):
						t.Fatalf("%s: a verdict on a %s intent: %v, not ErrAlreadyFinal", what, before.State, err)
					case !before.State.Final():
						verdict[id] = v // recorded; applied now or at the next attempt
					}
				}
			case 6:
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = kvtest.OpenPath(t, path, opts, sideeffect.RecordKind)
				if x, err = sideeffect.New(db, cfg); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range ids {
				checkIntent(t, what, db, x, fake, id, verdict[id], maxAttempts)
			}
		}
	})
}

// checkIntent checks one intent against the provider's record of it.
func checkIntent(t *testing.T, at string, db *kv.DB, x *sideeffect.Executor, fake *providertest.Fake, id string, verdict sideeffect.State, maxAttempts int) {
	t.Helper()
	ops := fake.Ops(id)
	effects := 0
	for i, op := range ops {
		switch op {
		case "do:replayed":
			t.Fatalf("%s: intent %s was sent again after the provider took it: %v", at, id, ops)
		case "do:charged", "do:lost":
			effects++
		}
		if strings.HasPrefix(op, "do:") && i > 0 && ops[i-1] != "status:not_found" {
			t.Fatalf("%s: intent %s was sent again without a status saying the provider never got it: %v", at, id, ops)
		}
	}
	if effects > 1 {
		t.Fatalf("%s: intent %s took effect %d times: %v", at, id, effects, ops)
	}
	in, err := x.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("%s: get %s: %v", at, id, err)
	}
	charged := false
	for _, c := range fake.Charges() {
		charged = charged || c.DownstreamKey == id
	}
	declined := slices.Contains(ops, "do:declined")
	switch {
	case in.Attempts > maxAttempts:
		t.Fatalf("%s: intent %s made %d attempts, at most %d", at, id, in.Attempts, maxAttempts)
	case in.State == sideeffect.StateNeedsAttention && in.Attempts < maxAttempts:
		t.Fatalf("%s: intent %s parked after %d attempts", at, id, in.Attempts)
	case in.State.Final() && verdict != 0 && in.State != verdict:
		t.Fatalf("%s: intent %s is %s, the operator said %s", at, id, in.State, verdict)
	case in.State == sideeffect.StateSucceeded && verdict == 0 && !charged:
		t.Fatalf("%s: intent %s succeeded, the provider has no charge: %v", at, id, ops)
	case in.State == sideeffect.StateFailed && verdict == 0 && (charged || !declined):
		t.Fatalf("%s: intent %s failed, the provider charged %t, declined %t: %v", at, id, charged, declined, ops)
	}
	var succeeded, failed int
	err = db.View(context.Background(), func(tx kv.Tx) error {
		succeeded, failed = kvtest.Counter(tx, "completions", "succeeded "+id), kvtest.Counter(tx, "completions", "failed "+id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [2]int{}
	switch in.State {
	case sideeffect.StateSucceeded:
		want[0] = 1
	case sideeffect.StateFailed:
		want[1] = 1
	}
	if [2]int{succeeded, failed} != want {
		t.Fatalf("%s: intent %s is %s; its completions ran %d (succeeded) and %d (failed) times", at, id, in.State, succeeded, failed)
	}
}
