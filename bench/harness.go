package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// HarnessConfig configures a load run: the same settings drive the bare
// bbolt workload and the oncekv one, in the same invocation.
type HarnessConfig struct {
	Dir          string        // where the two database files go (a temp dir if empty; removed after)
	Duration     time.Duration // per workload, split into alternating rounds
	Rounds       int           // alternations of bare and oncekv (default 2)
	Clients      int
	PayloadBytes int  // business value size
	ResponseSize int  // stored response body size
	Sync         bool // fsync on commit (durable) or not
	// Commit is "batch" (group commit) or "update" (one transaction per operation).
	Commit        string
	BatchDelay    time.Duration // kv.Options.MaxBatchDelay
	BatchSize     int           // kv.Options.MaxBatchSize (0: default)
	BoltBatch     bool          // use bbolt's own DB.Batch (10ms delay by default) instead of oncekv's group commit, for comparison
	Progress      func(done, total time.Duration)
	ResponseBytes []byte
}

// Result is one workload's measurements.
type Result struct {
	Name        string  `json:"name"`
	Ops         int64   `json:"ops"`
	Seconds     float64 `json:"seconds"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	P999us      float64 `json:"p999_us"`
	RatioToBare float64 `json:"ratio_to_bare,omitempty"` // throughput oncekv / bare
}

// Report is a harness run.
type Report struct {
	Config HarnessConfig `json:"-"`
	Bare   Result        `json:"bare"`
	OnceKV Result        `json:"oncekv"`
	Ratio  float64       `json:"ratio"` // oncekv throughput / bare throughput
}

type recorder struct {
	mu   sync.Mutex
	lats []time.Duration
	ops  atomic.Int64
}

func (r *recorder) add(d time.Duration) {
	r.ops.Add(1)
	r.mu.Lock()
	r.lats = append(r.lats, d)
	r.mu.Unlock()
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return float64(sorted[max(i, 0)].Nanoseconds()) / 1000
}

// RunHarness runs the bare and the oncekv workloads with identical settings,
// in alternating rounds, and reports both and their ratio.
func RunHarness(ctx context.Context, cfg HarnessConfig) (Report, error) {
	if cfg.Clients <= 0 || cfg.Duration <= 0 {
		return Report{}, fmt.Errorf("bench: clients and duration must be positive")
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 2
	}
	if cfg.Commit == "" {
		cfg.Commit = "batch"
	}
	if cfg.Commit != "batch" && cfg.Commit != "update" {
		return Report{}, fmt.Errorf("bench: commit must be batch or update, not %q", cfg.Commit)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "oncekv-bench-")
		if err != nil {
			return Report{}, err
		}
		defer func() { _ = os.RemoveAll(d) }()
		dir = d
	}
	opts := &kv.Options{NoSync: !cfg.Sync, MaxBatchDelay: cfg.BatchDelay, MaxBatchSize: cfg.BatchSize}
	bareDB, err := kv.Open(filepath.Join(dir, "bare.db"), opts)
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = bareDB.Close() }()
	onceDB, err := kv.Open(filepath.Join(dir, "oncekv.db"), opts)
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = onceDB.Close() }()
	if cfg.BoltBatch {
		for _, db := range []*kv.DB{bareDB, onceDB} {
			if cfg.BatchDelay > 0 {
				db.Bolt().MaxBatchDelay = cfg.BatchDelay
			}
		}
	}
	l, err := ledger.New(onceDB, nil)
	if err != nil {
		return Report{}, err
	}
	payload := make([]byte, cfg.PayloadBytes)
	response := make([]byte, cfg.ResponseSize)
	_, _ = rand.Read(payload)
	for i := range response {
		response[i] = 'a' + byte(i%26)
	}
	var seq atomic.Uint64
	newKey := func() []byte {
		n := seq.Add(1) * 0x9E3779B97F4A7C15
		return binary.BigEndian.AppendUint64([]byte("k"), n)
	}
	business := func(tx kv.Tx, k []byte) error {
		b := tx.Bucket([]byte("orders"))
		if b == nil {
			var err error
			if b, err = tx.CreateBucketIfNotExists([]byte("orders")); err != nil {
				return err
			}
		}
		return b.Put(k, payload)
	}
	commit := func(db *kv.DB, fn func(kv.Tx) error) error {
		switch {
		case cfg.Commit == "update":
			return db.Update(ctx, fn)
		case cfg.BoltBatch:
			return db.Bolt().Batch(func(btx *boltTx) error { return fn(kv.WrapTx(btx)) })
		}
		return db.Batch(ctx, fn)
	}
	bareOp := func() error {
		k := newKey()
		return commit(bareDB, func(tx kv.Tx) error { return business(tx, k) })
	}
	onceOp := func() error {
		k := newKey()
		req := ledger.Request{Scope: "bench|POST /v1/orders", Key: fmt.Sprintf("%x", k), Fingerprint: ledger.Fingerprint{1}}
		work := func(tx kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Body: response}, business(tx, k)
		}
		if cfg.Commit == "batch" && !cfg.BoltBatch {
			_, err := l.Do(ctx, req, work)
			return err
		}
		return commit(onceDB, func(tx kv.Tx) error { _, err := l.DoTx(ctx, tx, req, work); return err })
	}

	var bareRec, onceRec recorder
	var bareTime, onceTime time.Duration
	per := cfg.Duration / time.Duration(cfg.Rounds)
	total := 2 * cfg.Duration
	var elapsed time.Duration
	for r := 0; r < cfg.Rounds; r++ {
		for _, w := range []struct {
			op  func() error
			rec *recorder
			t   *time.Duration
		}{{bareOp, &bareRec, &bareTime}, {onceOp, &onceRec, &onceTime}} {
			took, err := drive(ctx, cfg.Clients, per, w.op, w.rec)
			if err != nil {
				return Report{}, err
			}
			*w.t += took
			elapsed += per
			if cfg.Progress != nil {
				cfg.Progress(elapsed, total)
			}
		}
	}
	rep := Report{Config: cfg, Bare: summarize("bare", &bareRec, bareTime), OnceKV: summarize("oncekv", &onceRec, onceTime)}
	if rep.Bare.OpsPerSec > 0 {
		rep.Ratio = rep.OnceKV.OpsPerSec / rep.Bare.OpsPerSec
		rep.OnceKV.RatioToBare = rep.Ratio
	}
	return rep, nil
}

// drive runs op from c clients for d and records latencies.
func drive(ctx context.Context, c int, d time.Duration, op func() error, rec *recorder) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for range c {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				if err := op(); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				rec.add(time.Since(t))
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return 0, *e
	}
	return time.Since(start), ctx.Err()
}

func summarize(name string, r *recorder, took time.Duration) Result {
	slices.Sort(r.lats)
	res := Result{Name: name, Ops: r.ops.Load(), Seconds: took.Seconds(),
		P50us: pct(r.lats, 0.50), P99us: pct(r.lats, 0.99), P999us: pct(r.lats, 0.999)}
	if took > 0 {
		res.OpsPerSec = float64(res.Ops) / took.Seconds()
	}
	return res
}
