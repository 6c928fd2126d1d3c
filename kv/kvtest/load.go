package kvtest

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// Outcome is one call's key and error (CloseUnderLoad).
type Outcome struct {
	Key string
	Err error
}

// CloseUnderLoad runs call from workers goroutines, each with the keys
// "w<worker>-<n>" one after another until its first error. Once every
// worker has made warm calls (or stopped before), it runs closeDB, and it
// returns every call's outcome when all the workers have ended: a test of
// what a database closed under live callers answers them. Workers still
// calling a minute after closeDB fail the test (calls hang after Close).
func CloseUnderLoad(t testing.TB, workers, warm int, call func(key string) error, closeDB func() error) []Outcome {
	t.Helper()
	var (
		mu       sync.Mutex
		outcomes []Outcome
		wg       sync.WaitGroup
		warmed   sync.WaitGroup
	)
	warmed.Add(workers)
	for w := range workers {
		wg.Go(func() {
			var once sync.Once
			defer once.Do(warmed.Done) // a worker that stops early is warm enough
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				err := call(key)
				mu.Lock()
				outcomes = append(outcomes, Outcome{key, err})
				mu.Unlock()
				if i+1 == warm {
					once.Do(warmed.Done)
				}
				if err != nil {
					return
				}
			}
		})
	}
	warmed.Wait()
	if err := closeDB(); err != nil {
		t.Fatalf("close under load: %v", err)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatal("calls hang after Close")
	}
	return outcomes
}
