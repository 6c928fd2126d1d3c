package observe_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
)

// An observer of plain functions, set once on the database, counts what
// the ledger did with each request and how many calls each commit
// carried. The otel module builds the same struct from OpenTelemetry
// meters and tracers.
func Example() {
	var mu sync.Mutex
	outcomes := map[observe.Outcome]int{}
	commits, calls := 0, 0
	obs := &observe.Observer{
		// Called on the caller's goroutine, after the call: keep it quick.
		Request: func(_ context.Context, e observe.Request) {
			mu.Lock()
			defer mu.Unlock()
			outcomes[e.Outcome]++
		},
		// Called once a write transaction has committed (or failed).
		Commit: func(e observe.Commit) {
			mu.Lock()
			defer mu.Unlock()
			if !e.Err {
				commits++
				calls += e.Calls
			}
		},
	}

	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), &kv.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	l, _ := ledger.New(db, nil)

	scope, _ := ledger.Scope("acme", "POST", "/v1/orders")
	send := func(key string, fp byte) {
		_, _ = l.Do(context.Background(), ledger.Request{Scope: scope, Key: key, Fingerprint: ledger.Fingerprint{fp}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
	}
	send("k1", 1) // new
	send("k1", 1) // a retry: replayed
	send("k1", 2) // the key reused for another request: mismatch
	send("k2", 1) // new

	mu.Lock()
	defer mu.Unlock()
	fmt.Println("new:", outcomes[observe.OutcomeNew], "replay:", outcomes[observe.OutcomeReplay], "mismatch:", outcomes[observe.OutcomeMismatch])
	fmt.Println("commits:", commits, "calls in them:", calls) // the replay and the mismatch wrote nothing
	// Output:
	// new: 2 replay: 1 mismatch: 1
	// commits: 2 calls in them: 2
}
