package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/seal"
)

// HarnessConfig configures a load run: the same settings drive every
// workload, in the same invocation.
type HarnessConfig struct {
	Dir          string        // where the database files go (a temp dir if empty; removed after)
	Duration     time.Duration // per workload, split into alternating rounds
	Rounds       int           // alternations of the workloads (default 2)
	Clients      int
	PayloadBytes int  // business value size
	ResponseSize int  // stored response body size
	Sync         bool // fsync on commit (durable) or not
	// Commit is "batch" (group commit) or "update" (one transaction per operation).
	Commit     string
	BatchDelay time.Duration // kv.Options.MaxBatchDelay
	BatchSize  int           // kv.Options.MaxBatchSize (0: default)
	// SyncFreelist sets kv.Options.SyncFreelist on every file: bbolt's
	// freelist written at every commit instead of at close.
	SyncFreelist bool
	// Gather sets kv.Options.GatherCallers: a batch waits for the callers
	// of the previous one to come back.
	Gather bool
	// BoltBatch commits through bbolt's own DB.Batch (10ms delay by
	// default) instead of oncekv's group commit, for comparison.
	BoltBatch bool
	// Preload fills every file with this many business rows (and the
	// oncekv files with as many idempotency records) before measuring, so
	// the trees have a realistic depth.
	Preload int
	// Tenants spreads the ledger workloads' requests over this many
	// tenants (t0000 to t9999, by key) instead of one (0 or 1: one
	// tenant; at most 10,000). Their usage is counted in memory; when
	// each had a counter in the file, past a few dozen the counters no
	// longer fitted inline, and a commit wrote their leaves.
	Tenants int
	// Quota gives every tenant of the ledger workloads a quota of this
	// many records (ledger.Config.Quota; 0: none), so that every new
	// request checks its tenant's usage. Set it above what a run writes
	// and nothing is refused: the throughput against the run without is
	// what checking costs.
	Quota int64
	// QuotaCountAge is the quota's ledger.Quota.MaxCountAge (0: its
	// default; negative: every check reads the tenant's usage in its
	// transaction). It matters on a store several processes write (etcd):
	// with many tenants, each seen now and then, it sets how often a
	// tenant's count is read again.
	QuotaCountAge time.Duration
	// Keyed adds a workload "oncekv-keyed": the ledger on the layout of
	// format 1 (records under their keys, with an expiry index), the one
	// the record log replaced, in the same run.
	Keyed bool
	// BareBoltBatch adds a workload "bare-boltbatch": the bare write
	// through bbolt's own DB.Batch.
	BareBoltBatch bool
	// Encrypted adds a workload "oncekv-encrypted": the ledger workload on
	// a database with a key ring (kv.Options.Cipher, a random key), so
	// the stored responses are sealed: its throughput against "oncekv" is
	// the cost of encryption at rest.
	Encrypted bool
	// Uncached adds a workload "oncekv-uncached": the ledger workload
	// with its cache of recent records off (kv.Options.RecentCacheBytes
	// negative). Its ratio to oncekv's is what the cache costs the write
	// path.
	Uncached bool
	// Floor adds a workload "floor": the business write plus one
	// record-sized Put at the tail of a second bucket (sequential keys,
	// leaves packed full), in the same group-committed transaction, with
	// no oncekv code: what bbolt charges any design that keeps a durable
	// record beside the business write. Its ratio is the ceiling under
	// the ledger's.
	Floor bool
	// Extra workloads run in the same rounds (oncekv bench --against-postgres).
	Extra         []Workload
	Progress      func(done, total time.Duration)
	ResponseBytes []byte
	// Trace, when set, receives an execution trace (runtime/trace) of the
	// measured rounds, the preload left out: go tool trace shows where a
	// batch's leader waits (for a processor, a lock, the disk). Each
	// workload's rounds are trace regions named after it.
	Trace io.Writer
}

// Workload is one side of a comparison.
type Workload struct {
	Name string
	// Preload inserts n rows before measuring (may be nil).
	Preload func(ctx context.Context, n int, payload []byte) error
	// Op performs one operation; key is unique across the run.
	Op func(ctx context.Context, key []byte, payload, response []byte) error
	// Close releases the workload's resources (may be nil).
	Close func() error
	// CacheBytes is the bound of the cache of recent records the
	// workload's ledger runs with (kv.DB.RecentCacheBytes): 0 for a
	// workload without a ledger, or with the cache off.
	CacheBytes int
}

// Result is one workload's measurements.
type Result struct {
	Name    string  `json:"name"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	// OpsPerSec is the mean of the workload's throughputs in its rounds
	// (each round runs for the same planned time).
	OpsPerSec float64 `json:"ops_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	// RatioToBare is this workload's throughput over the bare
	// workload's, round for round: the sum of its rounds' throughputs
	// over the sum of bare's. It lies between RatioMin and RatioMax.
	RatioToBare float64 `json:"ratio_to_bare"`
	// RatioMin and RatioMax are the lowest and highest of the ratios
	// measured round by round (this workload's throughput in a round over
	// the bare workload's in the same round): how far one run's ratio
	// moves while it runs. With one round they are RatioToBare's.
	RatioMin float64 `json:"ratio_min"`
	RatioMax float64 `json:"ratio_max"`
	// Batch is the mean number of operations per commit, for workloads
	// on oncekv's group commit (0 for the others).
	Batch float64 `json:"batch,omitempty"`
	// Where a commit's time goes, for the same workloads: CommitUs is
	// the mean time of a commit's transaction (the batch's functions,
	// bbolt's spill, the page writes and the fsync), WriteUs the part of
	// it bbolt spent writing pages and syncing, Pages the pages bbolt
	// wrote per commit. CommitUs - WriteUs is the CPU inside the writer's
	// critical section, which the batch's operations share.
	CommitUs float64 `json:"commit_us,omitempty"`
	WriteUs  float64 `json:"write_us,omitempty"`
	Pages    float64 `json:"pages,omitempty"`
	// CacheBytes is the workload's Workload.CacheBytes: which ledger, the
	// cache of recent records on or off, the figures are of.
	CacheBytes int `json:"cache_bytes,omitempty"`
	// CPUus is the CPU time (user and system) the process used while
	// the workload's rounds ran, per operation: its clients, the group
	// commit, the runtime and the garbage collector, and the kernel's
	// side of its writes and fsyncs. OpsPerSec * CPUus is the cores the
	// workload kept busy: where that is short of the machine's, the CPU
	// is not what bounds its throughput (durable, the writer's commit
	// cycle is). 0 where the system does not report CPU time (Windows).
	CPUus float64 `json:"cpu_us,omitempty"`
}

// Report is a harness run: the bare workload first, then oncekv, then the
// comparisons asked for.
type Report struct {
	Config  HarnessConfig `json:"-"`
	Results []Result      `json:"results"`
}

// Get returns the result of the named workload.
func (r Report) Get(name string) Result {
	for _, res := range r.Results {
		if res.Name == name {
			return res
		}
	}
	return Result{}
}

// Ratio is oncekv's throughput over bare's.
func (r Report) Ratio() float64 { return r.Get("oncekv").RatioToBare }

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

const ordersBucket = "orders"

// business is the write every workload does: one Put of payload under a
// well-spread key.
func business(tx kv.Tx, k, payload []byte) error {
	b := tx.Bucket([]byte(ordersBucket))
	if b == nil {
		var err error
		if b, err = tx.CreateBucketIfNotExists([]byte(ordersBucket)); err != nil {
			return err
		}
	}
	return b.Put(k, payload)
}

// preloadKey is the key of preloaded row i; measured operations use keys
// from another space.
func preloadKey(i int) []byte {
	return binary.BigEndian.AppendUint64([]byte("p"), uint64(i)*0x9E3779B97F4A7C15)
}

// fill preloads n rows in transactions of 1,000 through put.
func fill(ctx context.Context, db *kv.DB, n int, put func(tx kv.Tx, i int) error) error {
	chunk := db.Traits().Fit(1000, 4) // a few writes per row on a backend with a per-transaction limit
	for i := 0; i < n; i += chunk {
		err := db.Update(ctx, func(tx kv.Tx) error {
			for j := i; j < min(i+chunk, n); j++ {
				if err := put(tx, j); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// RunHarness runs the workloads with identical settings, in alternating
// rounds, and reports each with its ratio to the bare one.
func RunHarness(ctx context.Context, cfg HarnessConfig) (Report, error) {
	if cfg.Clients <= 0 || cfg.Duration <= 0 {
		return Report{}, fmt.Errorf("bench: clients and duration must be positive")
	}
	if cfg.PayloadBytes < 0 || cfg.ResponseSize < 0 || cfg.Preload < 0 || cfg.BatchSize < 0 || cfg.BatchDelay < 0 {
		return Report{}, fmt.Errorf("bench: payload, response, preload, batch size and batch delay may not be negative")
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
	opts := kv.Options{NoSync: !cfg.Sync, MaxBatchDelay: cfg.BatchDelay, MaxBatchSize: cfg.BatchSize, GatherCallers: cfg.Gather, SyncFreelist: cfg.SyncFreelist}
	commits := map[string]*commitStats{} // per workload, counted while measuring
	openWith := func(base kv.Options) func(string) (*kv.DB, error) {
		return func(name string) (*kv.DB, error) {
			cs := &commitStats{}
			o := base
			o.Observer = &observe.Observer{Commit: cs.add}
			db, err := kv.Open(filepath.Join(dir, name+".db"), &o)
			if err != nil {
				return nil, err
			}
			cs.db, commits[name] = db, cs
			if cfg.BatchDelay > 0 {
				db.Bolt().MaxBatchDelay = cfg.BatchDelay
			}
			return db, nil
		}
	}
	open := openWith(opts)

	workloads := []Workload{}
	defer func() {
		for _, w := range workloads {
			if w.Close != nil {
				_ = w.Close()
			}
		}
	}()
	bare, err := BareWorkload("bare", cfg, open, cfg.BoltBatch)
	if err != nil {
		return Report{}, err
	}
	workloads = append(workloads, bare)
	once, err := LedgerWorkload(ctx, "oncekv", cfg, open, false)
	if err != nil {
		return Report{}, err
	}
	workloads = append(workloads, once)
	if cfg.BareBoltBatch {
		w, err := BareWorkload("bare-boltbatch", cfg, open, true)
		if err != nil {
			return Report{}, err
		}
		workloads = append(workloads, w)
	}
	if cfg.Encrypted {
		key, _ := seal.NewKey(1)
		ring, err := seal.NewRing(key)
		if err != nil {
			return Report{}, err
		}
		sealed := opts
		sealed.Cipher = ring
		w, err := LedgerWorkload(ctx, "oncekv-encrypted", cfg, openWith(sealed), false)
		if err != nil {
			return Report{}, err
		}
		workloads = append(workloads, w)
	}
	if cfg.Uncached {
		uncached := opts
		uncached.RecentCacheBytes = -1
		w, err := LedgerWorkload(ctx, "oncekv-uncached", cfg, openWith(uncached), false)
		if err != nil {
			return Report{}, err
		}
		workloads = append(workloads, w)
	}
	if cfg.Floor {
		w, err := FloorWorkload(ctx, "floor", cfg, open)
		if err != nil {
			return Report{}, err
		}
		workloads = append(workloads, w)
	}
	if cfg.Keyed {
		w, err := LedgerWorkload(ctx, "oncekv-keyed", cfg, open, true)
		if err != nil {
			return Report{}, err
		}
		workloads = append(workloads, w)
	}
	workloads = append(workloads, cfg.Extra...)

	payload := make([]byte, cfg.PayloadBytes)
	response := make([]byte, cfg.ResponseSize)
	_, _ = rand.Read(payload)
	for i := range response {
		response[i] = 'a' + byte(i%26)
	}
	if cfg.Preload > 0 {
		for _, w := range workloads {
			if w.Preload != nil {
				if err := w.Preload(ctx, cfg.Preload, payload); err != nil {
					return Report{}, fmt.Errorf("bench: preload %s: %w", w.Name, err)
				}
			}
		}
	}

	for _, cs := range commits {
		cs.reset()
	}

	if cfg.Trace != nil {
		if err := trace.Start(cfg.Trace); err != nil {
			return Report{}, fmt.Errorf("bench: trace: %w", err)
		}
		defer trace.Stop()
	}
	var seq atomic.Uint64
	newKey := func() []byte {
		return binary.BigEndian.AppendUint64([]byte("k"), seq.Add(1)*0x9E3779B97F4A7C15)
	}
	recs := make([]recorder, len(workloads))
	took := make([]time.Duration, len(workloads))
	cpu := make([]time.Duration, len(workloads))
	per := cfg.Duration / time.Duration(cfg.Rounds)
	total := time.Duration(len(workloads)) * cfg.Duration
	var elapsed time.Duration
	// rate[r][i] is workload i's throughput in round r. Each round starts
	// one workload further on, so that none always follows the same one
	// (the page cache and the disk carry some of one workload into the
	// next).
	rate := make([][]float64, cfg.Rounds)
	for r := range cfg.Rounds {
		rate[r] = make([]float64, len(workloads))
		for j := range workloads {
			i := (r + j) % len(workloads)
			w := workloads[i]
			before := recs[i].ops.Load()
			cpu0, _ := processCPU()
			var d time.Duration
			var err error
			// The label lets a CPU profile be split by workload
			// (go tool pprof -tagfocus workload=oncekv): the group
			// commit's leader is one of the clients, so the batch's
			// transaction carries its workload's label too.
			pprof.Do(ctx, pprof.Labels("workload", w.Name), func(ctx context.Context) {
				trace.WithRegion(ctx, w.Name, func() {
					d, err = drive(ctx, cfg.Clients, per, func() error { return w.Op(ctx, newKey(), payload, response) }, &recs[i])
				})
			})
			if err != nil {
				return Report{}, fmt.Errorf("bench: %s: %w", w.Name, err)
			}
			took[i] += d
			if cpu1, ok := processCPU(); ok {
				cpu[i] += cpu1 - cpu0
			}
			if d > 0 {
				rate[r][i] = float64(recs[i].ops.Load()-before) / d.Seconds()
			}
			elapsed += per
			if cfg.Progress != nil {
				cfg.Progress(elapsed, total)
			}
		}
	}
	rep := Report{Config: cfg}
	for i, w := range workloads {
		res := summarize(w.Name, &recs[i], took[i])
		res.OpsPerSec = meanRate(rate, i)
		res.RatioToBare, res.RatioMin, res.RatioMax = roundRatios(rate, i)
		res.CacheBytes = w.CacheBytes
		if res.Ops > 0 {
			res.CPUus = cpu[i].Seconds() * 1e6 / float64(res.Ops)
		}
		if cs := commits[w.Name]; cs != nil {
			cs.fill(&res)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// commitStats counts one workload's commits through its observer, and
// the pages bbolt wrote for them.
type commitStats struct {
	db                 *kv.DB
	n, duration, write atomic.Int64
	pagesBefore        int64
}

func (c *commitStats) add(e observe.Commit) {
	c.n.Add(1)
	c.duration.Add(int64(e.Duration))
	c.write.Add(int64(e.Write))
}

// reset starts counting, when the measurement starts.
func (c *commitStats) reset() {
	c.n.Store(0)
	c.duration.Store(0)
	c.write.Store(0)
	c.pagesBefore = pagesWritten(c.db)
}

// pagesWritten is the number of pages bbolt has written to db's file (0
// on another backend).
func pagesWritten(db *kv.DB) int64 {
	if db.Bolt() == nil {
		return 0
	}
	st := db.Bolt().Stats()
	return st.TxStats.GetWrite()
}

// fill sets res's per-commit figures (none when nothing was committed
// through oncekv's group commit, as with bbolt's own DB.Batch).
func (c *commitStats) fill(res *Result) {
	n := c.n.Load()
	if n == 0 {
		return
	}
	per := float64(n)
	res.Batch = float64(res.Ops) / per
	res.CommitUs = float64(c.duration.Load()) / per / 1e3
	res.WriteUs = float64(c.write.Load()) / per / 1e3
	res.Pages = float64(pagesWritten(c.db)-c.pagesBefore) / per
}

// BareWorkload is the baseline: the business write alone, through oncekv's
// group commit (or bbolt's DB.Batch), on its own database from open (a
// bbolt file, or another backend: oncekv bench --against-etcd).
func BareWorkload(name string, cfg HarnessConfig, open func(string) (*kv.DB, error), boltBatch bool) (Workload, error) {
	db, err := open(name)
	if err != nil {
		return Workload{}, err
	}
	return Workload{
		Name: name,
		Preload: func(ctx context.Context, n int, payload []byte) error {
			return fill(ctx, db, n, func(tx kv.Tx, i int) error { return business(tx, preloadKey(i), payload) })
		},
		Op: func(ctx context.Context, k, payload, _ []byte) error {
			fn := func(tx kv.Tx) error { return business(tx, k, payload) }
			switch {
			case cfg.Commit == "update":
				return db.Update(ctx, fn)
			case boltBatch:
				return db.Bolt().Batch(func(btx *bolt.Tx) error { return fn(kv.WrapTx(btx)) })
			}
			return db.Batch(ctx, fn)
		},
		Close: db.Close,
	}, nil
}

// LedgerWorkload is the same business write through the idempotency ledger
// (look-up, business write, record with the stored response, one commit),
// on its own database from open; keyed puts the ledger on the format-1
// layout.
func LedgerWorkload(ctx context.Context, name string, cfg HarnessConfig, open func(string) (*kv.DB, error), keyed bool) (Workload, error) {
	db, err := open(name)
	if err != nil {
		return Workload{}, err
	}
	ldb := db
	if keyed {
		// A DB over a DB is not recognised as bbolt: the records stay under
		// their keys, as before the log.
		if ldb, err = kv.New(db, &kv.Options{MaxBatchDelay: cfg.BatchDelay, MaxBatchSize: cfg.BatchSize, GatherCallers: cfg.Gather}); err != nil {
			_ = db.Close()
			return Workload{}, err
		}
	}
	var lcfg *ledger.Config
	if cfg.Quota > 0 {
		lcfg = &ledger.Config{Quota: &ledger.Quota{MaxRecords: cfg.Quota, MaxCountAge: cfg.QuotaCountAge}}
	}
	l, err := ledger.New(ldb, lcfg)
	if err != nil {
		_ = ldb.Close()
		return Workload{}, err
	}
	request := func(k []byte) ledger.Request {
		return ledger.Request{Scope: benchScope(cfg.Tenants, k), Key: fmt.Sprintf("%x", k), Fingerprint: ledger.Fingerprint{1}}
	}
	return Workload{
		Name: name,
		Preload: func(ctx context.Context, n int, payload []byte) error {
			resp := ledger.Response{Status: 201, Body: make([]byte, cfg.ResponseSize)}
			return fill(ctx, ldb, n, func(tx kv.Tx, i int) error {
				k := preloadKey(i)
				_, err := l.DoTx(ctx, tx, request(k), func(tx kv.Tx) (ledger.Response, error) { return resp, business(tx, k, payload) })
				return err
			})
		},
		Op: func(ctx context.Context, k, payload, response []byte) error {
			work := func(tx kv.Tx) (ledger.Response, error) {
				return ledger.Response{Status: 201, Body: response}, business(tx, k, payload)
			}
			switch {
			case cfg.Commit == "batch" && !cfg.BoltBatch:
				_, err := l.Do(ctx, request(k), work)
				return err
			case cfg.BoltBatch:
				return db.Bolt().Batch(func(btx *bolt.Tx) error { _, err := l.DoTx(ctx, kv.WrapTx(btx), request(k), work); return err })
			}
			return ldb.Update(ctx, func(tx kv.Tx) error { _, err := l.DoTx(ctx, tx, request(k), work); return err })
		},
		Close:      ldb.Close,
		CacheBytes: ldb.RecentCacheBytes(),
	}, nil
}

// FloorWorkload is the business write plus one Put, at the tail of a
// second bucket, of a value as large as the log entry the ledger workload
// stores (measured on a scratch file from open): the least a durable
// record beside the business write costs in bbolt, with no look-up,
// encoding or directory.
func FloorWorkload(ctx context.Context, name string, cfg HarnessConfig, open func(string) (*kv.DB, error)) (Workload, error) {
	size, err := entrySize(ctx, cfg, open)
	if err != nil {
		return Workload{}, err
	}
	db, err := open(name)
	if err != nil {
		return Workload{}, err
	}
	record := floorRecord(size)
	return Workload{
		Name: name,
		Preload: func(ctx context.Context, n int, payload []byte) error {
			return fill(ctx, db, n, func(tx kv.Tx, i int) error {
				if err := business(tx, preloadKey(i), payload); err != nil {
					return err
				}
				return record(tx)
			})
		},
		Op: func(ctx context.Context, k, payload, _ []byte) error {
			fn := func(tx kv.Tx) error {
				if err := business(tx, k, payload); err != nil {
					return err
				}
				return record(tx)
			}
			if cfg.Commit == "update" {
				return db.Update(ctx, fn)
			}
			return db.Batch(ctx, fn)
		},
		Close: db.Close,
	}, nil
}

// floorRecord returns the floor's record write: one Put of a size-byte
// value at a new position (sequential keys) in a bbolt transaction, laid
// out as the ledger lays out its records (internal/recstore/tail.go): in a
// "floor.tail" bucket of one leaf page at most, whose entries move to the
// "floor.log" bucket (leaves packed full) when the next would not fit; a
// value of half a page or more goes to the log directly, and so do the
// values a transaction puts after it moved the tail.
func floorRecord(size int) func(kv.Tx) error {
	entry := make([]byte, size)
	var seq atomic.Uint64 // bbolt's single writer makes each transaction's keys ascend
	var movedIn atomic.Int64
	var budget int // set in the first transaction; bbolt's writer lock orders the rest after it
	return func(tx kv.Tx) error {
		bt := kv.BoltTx(tx)
		if bt == nil {
			return fmt.Errorf("bench: the floor needs bbolt")
		}
		log, err := bt.CreateBucketIfNotExists([]byte("floor.log"))
		if err != nil {
			return err
		}
		log.FillPercent = 1
		k := binary.BigEndian.AppendUint64(nil, seq.Add(1))
		const leafHeader, leafElement = 16, 16
		if budget == 0 { // one database per floor: its page size is read once
			budget = bt.DB().Info().PageSize - leafHeader
		}
		cost := leafElement + len(k) + len(entry)
		if 2*cost >= budget || movedIn.Load() == int64(bt.ID()) {
			return log.Put(k, entry)
		}
		tail, err := bt.CreateBucketIfNotExists([]byte("floor.tail"))
		if err != nil {
			return err
		}
		used := 0
		c := tail.Cursor()
		for tk, tv := c.First(); tk != nil; tk, tv = c.Next() {
			if used += leafElement + len(tk) + len(tv); used+cost > budget {
				if err := moveAll(tail, log); err != nil {
					return err
				}
				movedIn.Store(int64(bt.ID()))
				break
			}
		}
		return tail.Put(k, entry)
	}
}

// moveAll moves every entry of from to to.
func moveAll(from, to *bolt.Bucket) error {
	var keys [][]byte
	c := from.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		k = bytes.Clone(k)
		if err := to.Put(k, bytes.Clone(v)); err != nil {
			return err
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := from.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// benchScope is the scope of the ledger workloads' request for key k:
// tenant "bench", or with tenants > 1 one of t0000 to t9999 picked by k
// (the same length, so the records' size does not change with it).
func benchScope(tenants int, k []byte) string {
	if tenants <= 1 {
		return "bench|POST /v1/orders"
	}
	var h uint32 = 2166136261 // FNV-1a: keys from a counter spread evenly
	for _, c := range k {
		h = (h ^ uint32(c)) * 16777619
	}
	return fmt.Sprintf("t%04d|POST /v1/orders", h%uint32(tenants)) // #nosec G115 -- at most 10,000
}

// entrySize is the size of the log entry the ledger workload stores per
// operation, measured on a scratch file from open.
func entrySize(ctx context.Context, cfg HarnessConfig, open func(string) (*kv.DB, error)) (int, error) {
	db, err := open("entry-size")
	if err != nil {
		return 0, err
	}
	defer func() { _ = db.Close() }()
	req := ledger.Request{Scope: "bench|POST /v1/orders", Key: fmt.Sprintf("%x", preloadKey(1)), Fingerprint: ledger.Fingerprint{1}}
	return storedEntrySize(ctx, db, req, ledger.Response{Status: 201, Body: make([]byte, cfg.ResponseSize)})
}

// storedEntrySize stores resp for req through a ledger on db and returns
// the size of the log entry written: the record, and the scope and key it
// is filed under.
func storedEntrySize(ctx context.Context, db *kv.DB, req ledger.Request, resp ledger.Response) (int, error) {
	l, err := ledger.New(db, nil)
	if err != nil {
		return 0, err
	}
	if _, err := l.Do(ctx, req, func(kv.Tx) (ledger.Response, error) { return resp, nil }); err != nil {
		return 0, err
	}
	r, err := l.Get(ctx, req.Scope, req.Key)
	if err != nil {
		return 0, err
	}
	return r.StoredBytes + len(req.Scope) + len(req.Key) + 9, nil // framing: header, two lengths, checksum
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

// meanRate is workload i's throughput over the run: the mean of its
// rounds' throughputs, each round running for the same planned time.
// (Its operations over its time would weigh a round by how long its
// last operations took to finish after the round's end, and the run's
// ratio could then fall outside its rounds'.)
func meanRate(rate [][]float64, i int) float64 {
	if len(rate) == 0 {
		return 0
	}
	var sum float64
	for _, r := range rate {
		sum += r[i]
	}
	return sum / float64(len(rate))
}

// roundRatios returns the ratio of workload i's throughput to the bare
// workload's (index 0) over the rounds of rate in which the bare
// workload did something, and the lowest and highest of those rounds'
// own ratios. The run's ratio is the sum of i's throughputs over the sum
// of bare's (their means' ratio when bare ran every round), so it lies
// between the lowest and the highest.
func roundRatios(rate [][]float64, i int) (ratio, lo, hi float64) {
	first := true
	var sum, bare float64
	for _, r := range rate {
		if r[0] <= 0 {
			continue
		}
		sum += r[i]
		bare += r[0]
		v := r[i] / r[0]
		if first || v < lo {
			lo = v
		}
		if first || v > hi {
			hi = v
		}
		first = false
	}
	if bare > 0 {
		ratio = sum / bare
	}
	return ratio, lo, hi
}

func summarize(name string, r *recorder, took time.Duration) Result {
	slices.Sort(r.lats)
	return Result{Name: name, Ops: r.ops.Load(), Seconds: took.Seconds(),
		P50us: pct(r.lats, 0.50), P99us: pct(r.lats, 0.99), P999us: pct(r.lats, 0.999)}
}
