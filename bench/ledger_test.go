package bench

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

var ctx = context.Background()

func putOrder(tx kv.Tx, k []byte) error {
	b := tx.Bucket([]byte("orders"))
	if b == nil {
		var err error
		if b, err = tx.CreateBucketIfNotExists([]byte("orders")); err != nil {
			return err
		}
	}
	return b.Put(k, orderValue)
}

var respHeader = http.Header{"Content-Type": {"application/json"}}

// BenchmarkSingleTx compares the single-transaction idempotent write
// (ledger.Do: look-up, business write, record, expiry index, one commit)
// with a bare bbolt Update doing the same business write. NoSync isolates
// the CPU cost from the disk.
func BenchmarkSingleTx(b *testing.B) { singleTxPairs(b, 0, false) }

// BenchmarkSingleTxPreloaded is BenchmarkSingleTx on files that already
// hold 200k orders (and, on the oncekv side, their 200k records), written
// in transactions of 1000 as a service's history would be: the business
// tree is deeper and the file has a freelist of some size. With
// freelist=every-commit (kv.Options.SyncFreelist, bbolt's default) bbolt
// sorts and writes that list at every commit, the bare write's as well;
// freelist=at-close is oncekv's default.
func BenchmarkSingleTxPreloaded(b *testing.B) {
	for _, sync := range []bool{false, true} {
		name := "freelist=at-close"
		if sync {
			name = "freelist=every-commit"
		}
		b.Run(name, func(b *testing.B) { singleTxPairs(b, 200000, sync) })
	}
}

// singleTxPairs times ledger.Do against the bare write, NoSync, on files
// preloaded with rows orders (and records) first; with rows, it reports
// the pages each side writes per operation. syncFreelist sets
// kv.Options.SyncFreelist on both.
func singleTxPairs(b *testing.B, rows int, syncFreelist bool) {
	opts := &kv.Options{NoSync: true, SyncFreelist: syncFreelist}
	bare := openDB(b, "bare", opts)
	db := openDB(b, "oncekv", opts)
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	preloadOrders(b, bare, rows, nil)
	preloadOrders(b, db, rows, l)
	bare0, db0 := pagesWritten(bare), pagesWritten(db)
	writePairs(b, bare, func(i int, k []byte) error {
		req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{byte(i)}}
		_, err := l.Do(ctx, req, func(tx kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Header: respHeader, Body: responseBody}, putOrder(tx, k)
		})
		return err
	})
	b.ReportMetric(float64(pagesWritten(bare)-bare0)/float64(b.N), "bare-pages/op")
	b.ReportMetric(float64(pagesWritten(db)-db0)/float64(b.N), "pages/op")
}

// preloadOrders stores n orders in db, 1000 per transaction, each with
// its idempotency record through l when l is not nil.
func preloadOrders(b *testing.B, db *kv.DB, n int, l *ledger.Ledger) {
	resp := ledger.Response{Status: 201, Header: respHeader, Body: responseBody}
	for i := 0; i < n; i += 1000 {
		err := db.Update(ctx, func(tx kv.Tx) error {
			for j := i; j < min(i+1000, n); j++ {
				if l == nil {
					if err := putOrder(tx, key("pre", j)); err != nil {
						return err
					}
					continue
				}
				req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("pre-idem", j)), Fingerprint: ledger.Fingerprint{byte(j)}}
				if _, err := l.DoTx(ctx, tx, req, func(tx kv.Tx) (ledger.Response, error) { return resp, putOrder(tx, key("pre", j)) }); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// fillReplays stores n completed records (and n bare values of the same
// size) and returns their requests.
func fillReplays(b *testing.B, l *ledger.Ledger, bare *kv.DB, n int) []ledger.Request {
	reqs := make([]ledger.Request, n)
	for i := range reqs {
		reqs[i] = ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{byte(i), 1}}
	}
	for i := 0; i < n; i += 1000 {
		err := l.DB().Update(ctx, func(tx kv.Tx) error {
			for j := i; j < min(i+1000, n); j++ {
				if _, err := l.DoTx(ctx, tx, reqs[j], func(kv.Tx) (ledger.Response, error) {
					return ledger.Response{Status: 201, Header: respHeader, Body: responseBody}, nil
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		err = bare.Update(ctx, func(tx kv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("responses"))
			if err != nil {
				return err
			}
			for j := i; j < min(i+1000, n); j++ {
				if err := bk.Put(key("idem", j), responseBody); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return reqs
}

// BenchmarkReplayHit compares answering a retry from the ledger with a
// bare bbolt View that reads and copies a value of the same size. The
// records were written by this process, as a retry's original almost
// always was moments before: the ledger answers from its cache of recent
// records (directory probe, checksum-framed entry, decode, copy of the
// stored response), with no read transaction. BenchmarkReplayCold is the
// same for records the cache does not hold.
func BenchmarkReplayHit(b *testing.B) {
	const n = 10000
	bare, db := openDB(b, "bare", &kv.Options{NoSync: true}), openDB(b, "oncekv", &kv.Options{NoSync: true})
	l, _ := ledger.New(db, nil)
	reqs := fillReplays(b, l, bare, n)
	replays(b, l, bare, reqs)
}

// replays times replaying reqs (stored by fillReplays) against the bare
// read of the same-sized values.
func replays(b *testing.B, l *ledger.Ledger, bare *kv.DB, reqs []ledger.Request) {
	var p pair
	var sink []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := reqs[i%len(reqs)]
		k := key("idem", i%len(reqs))
		p.timeBare(func() { sink = bareRead(bare, k, sink) })
		p.timeSubject(func() {
			res, err := l.Do(ctx, r, mustNotRun)
			if err != nil || !res.Replayed {
				b.Fatalf("not a replay: %v", err)
			}
		})
	}
	_ = sink
	p.report(b)
}

// BenchmarkReplayCold is BenchmarkReplayHit for records this process did
// not write (both files filled, closed and opened again): the ledger reads
// each record in a read transaction (directory probe, log Get, checksum,
// decode, copy), as it does for a record evicted from the cache of recent
// records or written before a restart.
func BenchmarkReplayCold(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	opts := &kv.Options{NoSync: true}
	open := func(name string) *kv.DB {
		db, err := kv.Open(filepath.Join(dir, name+".db"), opts)
		if err != nil {
			b.Fatal(err)
		}
		return db
	}
	bare, db := open("bare"), open("oncekv")
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	reqs := fillReplays(b, l, bare, n)
	_, _ = bare.Close(), db.Close()
	bare, db = open("bare"), open("oncekv")
	b.Cleanup(func() { _, _ = bare.Close(), db.Close() })
	if l, err = ledger.New(db, nil); err != nil {
		b.Fatal(err)
	}
	replays(b, l, bare, reqs)
	if st := l.Stats(); st.Cached != 0 {
		b.Fatalf("%d records cached: the replays were not cold", st.Cached)
	}
}

// BenchmarkMismatchReject measures rejecting a reused key (different
// fingerprint): a read-only look-up and a typed error, no write. The bare
// side is the same View as for replays.
func BenchmarkMismatchReject(b *testing.B) {
	const n = 10000
	bare, db := openDB(b, "bare", &kv.Options{NoSync: true}), openDB(b, "oncekv", &kv.Options{NoSync: true})
	l, _ := ledger.New(db, nil)
	reqs := fillReplays(b, l, bare, n)
	var p pair
	var sink []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := reqs[i%n]
		r.Fingerprint[31] = 0xff
		k := key("idem", i%n)
		p.timeBare(func() { sink = bareRead(bare, k, sink) })
		p.timeSubject(func() {
			if _, err := l.Do(ctx, r, mustNotRun); !errors.Is(err, ledger.ErrMismatch) {
				b.Fatalf("want a mismatch, got %v", err)
			}
		})
	}
	_ = sink
	p.report(b)
}

// BenchmarkTwoPhase compares claim (commit) + complete with the business
// write (commit) against one bare Update of the business write (NoSync).
func BenchmarkTwoPhase(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	bare, db := openDB(b, "bare", opts), openDB(b, "oncekv", opts)
	l, _ := ledger.New(db, nil)
	writePairs(b, bare, func(i int, k []byte) error {
		out, err := l.Claim(ctx, ledger.Request{Scope: "acme|POST /v1/pay", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{1}})
		if err != nil {
			return err
		}
		_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 200, Body: responseBody}, func(tx kv.Tx) error { return putOrder(tx, k) })
		return err
	})
}

// bareRead is the baseline of the read pairs: a bbolt View (raw, as the
// write pairs' bare Update is) that copies the stored value of the same
// size as a response.
func bareRead(db *kv.DB, k, buf []byte) []byte {
	_ = db.Bolt().View(func(tx *bolt.Tx) error {
		buf = append(buf[:0], tx.Bucket([]byte("responses")).Get(k)...)
		return nil
	})
	return buf
}

// mustNotRun is the work of a request that must be answered from its
// record.
func mustNotRun(kv.Tx) (ledger.Response, error) {
	return ledger.Response{}, errors.New("bench: the work ran for a request that had a record")
}

// BenchmarkCallsInOneTx measures what a call costs inside the writer's
// critical section when group commit has gathered many: one NoSync
// transaction of 256 calls per iteration, on three files in turn, the
// bare business write, its floor (the write plus a record-sized Put laid
// out as the ledger's log, floorRecord) and ledger.DoTx. It reports each
// side's time per call, commit included, and oncekv's ratio to the bare
// call and to the floor's. At 64 clients a batch holds some 55 calls run
// one after the other, so this is the figure the 64-client throughput
// follows.
func BenchmarkCallsInOneTx(b *testing.B) {
	const calls = 256
	opts := &kv.Options{NoSync: true}
	bare, floor, db := openDB(b, "bare", opts), openDB(b, "floor", opts), openDB(b, "oncekv", opts)
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	record := floorRecord(recordSize(b))
	resp := ledger.Response{Status: 201, Header: respHeader, Body: responseBody}
	var tBare, tFloor, tOncekv time.Duration
	// Each side's CPU samples carry its name (go test -cpuprofile, then
	// go tool pprof -tagfocus side=oncekv).
	update := func(db *kv.DB, t *time.Duration, call func(tx kv.Tx, i int) error, base int) {
		var err error
		start := time.Now()
		pprof.Do(ctx, pprof.Labels("side", filepath.Base(db.Path())), func(context.Context) {
			err = db.Bolt().Update(func(btx *bolt.Tx) error {
				tx := kv.WrapTx(btx)
				for i := base; i < base+calls; i++ {
					if err := call(tx, i); err != nil {
						return err
					}
				}
				return nil
			})
		})
		*t += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
	}
	floor0, db0 := pagesWritten(floor), pagesWritten(db)
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		base := n * calls
		update(bare, &tBare, func(tx kv.Tx, i int) error { return putOrder(tx, key("ord", i)) }, base)
		update(floor, &tFloor, func(tx kv.Tx, i int) error {
			if err := putOrder(tx, key("ord", i)); err != nil {
				return err
			}
			return record(tx)
		}, base)
		update(db, &tOncekv, func(tx kv.Tx, i int) error {
			req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{byte(i)}}
			_, err := l.DoTx(ctx, tx, req, func(tx kv.Tx) (ledger.Response, error) { return resp, putOrder(tx, key("ord", i)) })
			return err
		}, base)
	}
	per := float64(b.N * calls)
	b.ReportMetric(float64(tBare.Nanoseconds())/per, "bare-ns/call")
	b.ReportMetric(float64(tFloor.Nanoseconds())/per, "floor-ns/call")
	b.ReportMetric(float64(tOncekv.Nanoseconds())/per, "oncekv-ns/call")
	b.ReportMetric(float64(tOncekv)/float64(tBare), "ratio")
	b.ReportMetric(float64(tOncekv)/float64(tFloor), "floor-ratio")
	b.ReportMetric(float64(pagesWritten(floor)-floor0)/float64(b.N), "floor-pages/tx")
	b.ReportMetric(float64(pagesWritten(db)-db0)/float64(b.N), "pages/tx")
}
