package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// fixChecksum recomputes a record's CRC-32C after a test altered it.
func fixChecksum(v []byte) []byte {
	n := len(v) - 4
	binary.LittleEndian.PutUint32(v[n:], crc32.Checksum(v[:n], crc32.MakeTable(crc32.Castagnoli)))
	return v
}

const secret = "4111-1111-1111-1111 Jane Q. Customer"

func TestSealedRecordRoundTrip(t *testing.T) {
	ring := sealtest.Ring(t, 1)
	for _, body := range [][]byte{{}, []byte(`{"card":"` + secret + `"}`), bytes.Repeat([]byte(secret+" "), 400)} {
		r := sampleRecord(body)
		r.Response.Header.Set("X-Card", secret)
		var e record.Encoder
		v := bytes.Clone(encodeRecordWith(&e, ring, r, record.DefaultCompressThreshold))
		require.True(t, r.Sealed)
		require.Equal(t, uint32(1), r.KeyID)
		require.NotContains(t, string(v), secret, "a sealed record shows no header or body")
		require.NotContains(t, string(v), "application/json")

		got, err := decodeRecordWith(ring, r.Scope, r.Key, v, bodyRequired)
		require.NoError(t, err)
		require.Equal(t, r.Response, got.Response)
		require.Equal(t, len(body) > record.DefaultCompressThreshold, got.Compressed, "compressed before sealing")
		require.Equal(t, len(v), got.StoredBytes)

		// Without the key: status, times and sizes; the body only as "sealed".
		st, err := decodeRecordWith(nil, r.Scope, r.Key, v, statusOnly)
		require.NoError(t, err)
		require.Equal(t, 201, st.ResponseStatus)
		require.True(t, st.Sealed)
		require.Equal(t, r.ExpiresAt, st.ExpiresAt)
		listed, err := decodeRecordWith(nil, r.Scope, r.Key, v, bodyIfOpen)
		require.NoError(t, err)
		require.Nil(t, listed.Response)
		_, err = decodeRecordWith(nil, r.Scope, r.Key, v, bodyRequired)
		var oe *seal.OpenError
		require.ErrorAs(t, err, &oe)
		require.ErrorIs(t, err, seal.ErrUnknownKey)
		require.Equal(t, uint32(1), oe.KeyID)

		// Another ring with the same key ID (a wrong key file) does not open it.
		_, err = decodeRecordWith(sealtest.Ring(t, 2), r.Scope, r.Key, v, bodyRequired)
		require.ErrorIs(t, err, seal.ErrUnknownKey)
		wrong, err := seal.NewRing(seal.Key{ID: 1})
		require.NoError(t, err)
		_, err = decodeRecordWith(wrong, r.Scope, r.Key, v, bodyRequired)
		require.ErrorIs(t, err, seal.ErrTampered)

		// Swapped: the same value under another record does not open.
		_, err = decodeRecordWith(ring, r.Scope, "key-2", v, bodyRequired)
		require.ErrorIs(t, err, seal.ErrTampered)
		_, err = decodeRecordWith(ring, "other|POST /v1/orders", r.Key, v, bodyRequired)
		require.ErrorIs(t, err, seal.ErrTampered)
	}
}

// Every single flipped byte of a sealed record, checksum fixed up so that
// only the seal can catch it, fails with an error: never a replay of
// altered bytes, never a panic.
func TestSealedRecordTamperedByteByByte(t *testing.T) {
	ring := sealtest.Ring(t, 1)
	r := sampleRecord([]byte(`{"card":"` + secret + `"}`))
	var e record.Encoder
	v := bytes.Clone(encodeRecordWith(&e, ring, r, 0))
	blobStart := len(v) - 4 - (len(`{"card":"`+secret+`"}`) + seal.Overhead)
	for i := blobStart - 40; i < len(v)-4; i++ {
		bad := bytes.Clone(v)
		bad[i] ^= 0x20
		got, err := decodeRecordWith(ring, r.Scope, r.Key, fixChecksum(bad), bodyRequired)
		if err == nil {
			// A flip in a clear field (a time, the version) decodes: the
			// response it replays is still exactly the stored one.
			require.Less(t, i, blobStart, "byte %d flipped inside the seal and it opened", i)
			require.Equal(t, r.Response, got.Response)
		}
	}
}

func openSealed(t *testing.T, path string, ring *seal.Ring) (*kv.DB, *Ledger) {
	t.Helper()
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: ring})
	require.NoError(t, err)
	l, err := New(db, nil)
	require.NoError(t, err)
	return db, l
}

func storeSecret(t *testing.T, l *Ledger, key string) {
	t.Helper()
	_, err := l.Do(context.Background(), Request{Scope: "acme|POST /v1/cards", Key: key, Fingerprint: Fingerprint{1}},
		func(kv.Tx) (Response, error) {
			return Response{Status: 201, Header: map[string][]string{"X-Card": {secret}}, Body: []byte(`{"card":"` + secret + `","key":"` + key + `"}`)}, nil
		})
	require.NoError(t, err)
}

func replay(l *Ledger, key string) (*Record, error) {
	res, err := l.Do(context.Background(), Request{Scope: "acme|POST /v1/cards", Key: key, Fingerprint: Fingerprint{1}},
		func(kv.Tx) (Response, error) { return Response{}, errors.New("the work ran twice") })
	if err != nil {
		return nil, err
	}
	if !res.Replayed {
		return nil, errors.New("not a replay")
	}
	return &Record{Response: &res.Response}, nil
}

// The file at rest: with a Cipher, no stored header or body can be read
// from its bytes (the control without one shows that the grep bites).
func TestSealedFileRevealsNoBody(t *testing.T) {
	dir := t.TempDir()
	for _, ring := range []*seal.Ring{nil, sealtest.Ring(t, 1)} {
		path := filepath.Join(dir, fmt.Sprintf("cards-%v.db", ring != nil))
		db, l := openSealed(t, path, ring)
		for i := range 20 {
			storeSecret(t, l, fmt.Sprint(i))
		}
		got, err := replay(l, "7")
		require.NoError(t, err)
		require.Contains(t, string(got.Response.Body), secret)
		require.Equal(t, secret, got.Response.Header.Get("X-Card"))
		require.NoError(t, db.Close())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		if ring == nil {
			require.Contains(t, string(raw), secret, "control: the clear file shows the body")
		} else {
			require.NotContains(t, string(raw), secret)
			require.NotContains(t, string(raw), "X-Card")
			require.Contains(t, string(raw), "acme|POST /v1/cards", "scopes stay clear (documented)")
		}
	}
}

// Opened without its key, a sealed file still answers status and listing
// questions, and every replay fails with a typed error naming the record,
// without running the work again. A tampered stored value fails the same
// way (ErrTampered) and the check reports it.
func TestSealedWithoutKeyAndTampered(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cards.db")
	ring := sealtest.Ring(t, 1)
	db, l := openSealed(t, path, ring)
	for i := range 5 {
		storeSecret(t, l, fmt.Sprint(i))
	}
	require.NoError(t, db.Close())

	db, l = openSealed(t, path, nil)
	_, err := replay(l, "3")
	var re *RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "3", re.Key)
	require.ErrorIs(t, err, seal.ErrUnknownKey)
	n := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n = 0
		for r, err := range l.Records(tx, ListOptions{WithBody: true}) {
			require.NoError(t, err)
			require.True(t, r.Sealed)
			require.Equal(t, uint32(1), r.KeyID)
			require.Nil(t, r.Response)
			require.Equal(t, 201, r.ResponseStatus)
			n++
		}
		return nil
	}))
	require.Equal(t, 5, n)
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems, "without a key the check cannot open values, and does not call them damaged")
	require.NoError(t, db.Close())

	db, l = openSealed(t, path, ring)
	defer db.Close()
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, v, err := l.records.Get(tx, "acme|POST /v1/cards", "2")
		require.NoError(t, err)
		bad := bytes.Clone(v)
		bad[len(bad)-10] ^= 1 // inside GCM's tag
		_, err = l.records.Put(ctx, tx, "acme|POST /v1/cards", "2", ref, testExpiry(t, l, tx, "2"), testExpiry(t, l, tx, "2"), fixChecksum(bad))
		return err
	}))
	_, err = replay(l, "2")
	require.ErrorAs(t, err, &re)
	require.Equal(t, "2", re.Key)
	require.ErrorIs(t, err, seal.ErrTampered)
	problems, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Len(t, problems, 1)
	require.Contains(t, problems[0].Message, `"2": sealed response does not open`)
	_, err = replay(l, "1")
	require.NoError(t, err, "the other records are untouched")
}

func testExpiry(t *testing.T, l *Ledger, tx kv.Tx, key string) time.Time {
	_, r, err := l.load(tx, "acme|POST /v1/cards", key, false)
	require.NoError(t, err)
	return r.ExpiresAt
}

// Rotation under load: writers and replays run while a rekey moves every
// record to the new key; afterwards the old key is retired and every
// record, old or new, replays exactly once-stored bytes.
func TestRekeyUnderLoad(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cards.db")
	db, l := openSealed(t, path, nil)
	for i := range 300 {
		storeSecret(t, l, fmt.Sprint("clear-", i)) // before encryption was set
	}
	require.NoError(t, db.Close())
	db, l = openSealed(t, path, sealtest.Ring(t, 1))
	for i := range 700 {
		storeSecret(t, l, fmt.Sprint("k1-", i))
	}
	require.NoError(t, db.Close())

	db, l = openSealed(t, path, sealtest.Ring(t, 2, 1))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := range 150 {
				storeSecret(t, l, fmt.Sprintf("k2-%d-%d", w, i))
				if _, err := replay(l, fmt.Sprint("k1-", (w*150+i)%700)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	n, batches := sealtest.Reseal(t, db, Reseal, 64)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1000, n, "every record sealed under key 1 or in clear, once")
	require.Greater(t, batches, 1000/64)
	again, _ := sealtest.Reseal(t, db, Reseal, 500)
	require.Zero(t, again, "a second rekey finds nothing to do")
	require.Equal(t, 1600, l.Stats().Records)
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems, "usage counters follow the size change of sealing")
	require.NoError(t, db.Close())

	db, l = openSealed(t, path, sealtest.Ring(t, 2)) // key 1 retired
	defer db.Close()
	for _, k := range []string{"clear-0", "clear-299", "k1-0", "k1-699", "k2-3-149"} {
		got, err := replay(l, k)
		require.NoError(t, err, k)
		require.Equal(t, `{"card":"`+secret+`","key":"`+k+`"}`, string(got.Response.Body))
	}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for r, err := range l.Records(tx, ListOptions{}) {
			require.NoError(t, err)
			require.True(t, r.Sealed && r.KeyID == 2, "%s under key %d", r.Key, r.KeyID)
		}
		return nil
	}))
}

// The keyed layout (backends with several writers, such as etcd): a DB
// over a DB is not recognised as bbolt, so its records stay under their
// keys. Sealing, the check and a rekey work there as on the log.
func TestSealedKeyedLayout(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keyed.db")
	open := func(ring *seal.Ring) (*kv.DB, *Ledger) {
		inner, err := kv.Open(path, &kv.Options{NoSync: true})
		require.NoError(t, err)
		db, err := kv.New(inner, &kv.Options{Cipher: ring})
		require.NoError(t, err)
		l, err := New(db, nil)
		require.NoError(t, err)
		require.Equal(t, "keyed", l.records.Layout())
		return db, l
	}
	db, l := open(sealtest.Ring(t, 1))
	for i := range 50 {
		storeSecret(t, l, fmt.Sprint(i))
	}
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), secret)

	db, _ = open(sealtest.Ring(t, 2, 1))
	require.Same(t, db.Cipher(), kv.CipherOf(mustTx(t, db)))
	n, _ := sealtest.Reseal(t, db, Reseal, 7)
	require.Equal(t, 50, n)
	require.NoError(t, db.Close())

	db, l = open(sealtest.Ring(t, 2))
	defer db.Close()
	for _, k := range []string{"0", "49"} {
		got, err := replay(l, k)
		require.NoError(t, err)
		require.Contains(t, string(got.Response.Body), secret)
	}
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// mustTx returns a transaction of db that outlives its View (only to ask
// CipherOf, which reads nothing).
func mustTx(t *testing.T, db *kv.DB) kv.Tx {
	var out kv.Tx
	require.NoError(t, db.View(context.Background(), func(tx kv.Tx) error { out = tx; return nil }))
	return out
}

// A usage counter that does not decode stops its tenant's writes, but not
// the maintenance every tenant relies on: a rekey and a retention sweep
// go on past it (its value is lost anyway; the recount computes it from
// the records), the check still reports it, and the recount mends it.
// Counters are kept where the records are keyed (etcd); in the log an
// older version's counters are removed at open
// (TestUsageIsCountedFromTheRecordsAtOpen).
func TestMaintenanceGoesOnPastADamagedCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "damaged.db")
	openKeyed := func(opts *kv.Options) *kv.DB {
		file, err := kv.Open(path, opts)
		require.NoError(t, err)
		db, err := kv.New(severalWriters{file}, opts)
		require.NoError(t, err)
		return db
	}
	db := openKeyed(&kv.Options{NoSync: true}) // records stored in clear
	l, err := New(db, nil)
	require.NoError(t, err)
	for i := range 3 {
		storeSecret(t, l, fmt.Sprint("k-", i))
	}
	_, err = l.Do(ctx, Request{Scope: "globex|POST /v1/cards", Key: "g", Fingerprint: Fingerprint{1}},
		func(kv.Tx) (Response, error) { return Response{Status: 201}, nil })
	require.NoError(t, err)
	require.NoError(t, db.Close())
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(usageNS.Bytes()).Put([]byte("acme"), []byte("damaged"))
	})

	clock := kvtest.NewManualClock(time.Now())
	db = openKeyed(&kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1), Clock: clock})
	defer db.Close()
	l, err = New(db, nil)
	require.NoError(t, err)
	n, _ := sealtest.Reseal(t, db, Reseal, 2)
	require.Equal(t, 4, n, "the rekey sealed every record, acme's too")
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.NotEmpty(t, problems, "the damaged counter is still reported")

	clock.Advance(48 * time.Hour) // past the default retention
	st, err := retention.Sweep(ctx, db, nil, RecordKind)
	require.NoError(t, err)
	require.Equal(t, 4, st.Kinds["idempotency"].Deleted)
	require.Zero(t, l.Stats().Records)
	mended, err := RecountUsage(ctx, db)
	require.NoError(t, err)
	require.Equal(t, []UsageRecount{{Tenant: "acme", Damaged: 1}}, mended)
	problems, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// A record whose response was sealed in the first layout (AES-256-GCM
// under the key itself, before 2026-12-05) still replays its response,
// and a rekey to a new key moves it to the XAES-256-GCM layout.
func TestRecordSealedInTheFirstLayoutReplays(t *testing.T) {
	ring := sealtest.Ring(t, 1)
	r := sampleRecord([]byte(`{"card":"` + secret + `"}`))
	r.Response.Header.Set("X-Card", secret)
	var e record.Encoder
	v := bytes.Clone(encodeRecordWith(&e, ring, r, record.DefaultCompressThreshold))

	// The sealed response is the last field, behind its length, before
	// the checksum: seal its plaintext again in the first layout.
	end := len(v) - 4
	at, w := -1, 0
	for i := end - seal.Overhead; i > 0 && at < 0; i-- {
		n := binary.AppendUvarint(nil, uint64(end-i))
		if i >= len(n) && bytes.Equal(v[i-len(n):i], n) && seal.IsSealed(v[i:end]) {
			at, w = i, len(n)
		}
	}
	require.Positive(t, at, "the sealed response in the record")
	aad := responseAAD(r.Scope, r.Key)
	plain, err := ring.Open(nil, v[at:end], aad)
	require.NoError(t, err)
	old := sealtest.SealFirstLayout(sealtest.Key(1), plain, aad)
	rebuilt := binary.AppendUvarint(bytes.Clone(v[:at-w]), uint64(len(old)))
	rebuilt = fixChecksum(append(append(rebuilt, old...), 0, 0, 0, 0))

	got, err := decodeRecordWith(ring, r.Scope, r.Key, rebuilt, bodyRequired)
	require.NoError(t, err)
	require.Equal(t, r.Response, got.Response)
	require.True(t, got.Sealed)
	require.Equal(t, uint32(1), got.KeyID)
	_, err = decodeRecordWith(ring, r.Scope, "key-2", rebuilt, bodyRequired)
	require.ErrorIs(t, err, seal.ErrTampered, "still bound to its record")

	// Rekeyed: sealed again under the new key, in the XAES layout.
	next := sealtest.Ring(t, 2, 1)
	moved, err := decodeRecordWith(next, r.Scope, r.Key, rebuilt, bodyRequired)
	require.NoError(t, err)
	var e2 record.Encoder
	nv := encodeRecordWith(&e2, next, moved, record.DefaultCompressThreshold)
	back, err := decodeRecordWith(next, r.Scope, r.Key, nv, bodyRequired)
	require.NoError(t, err)
	require.Equal(t, r.Response, back.Response)
	require.Equal(t, uint32(2), back.KeyID)
	require.Equal(t, len(rebuilt)+(seal.Overhead-(3+4+12+16)), len(nv), "the XAES layout's nonce is 12 bytes longer")
}

// A rekey rewrites each response as it was stored, compressed or not:
// a body the ledger compressed stays compressed (it was worth it), and
// one stored whole (by a ledger that compressed nothing, or under the
// threshold) is not compressed by the rekey.
func TestRekeyKeepsEachBodysCompression(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "compressed.db")
	body := []byte(strings.Repeat(`{"line":"the same text, again and again"}`, 100))
	store := func(l *Ledger, key string) {
		_, err := l.Do(ctx, Request{Scope: "acme|POST /v1/cards", Key: key, Fingerprint: Fingerprint{1}},
			func(kv.Tx) (Response, error) { return Response{Status: 201, Body: body}, nil })
		require.NoError(t, err)
	}
	compressed := func(l *Ledger, db *kv.DB) map[string]bool {
		out := map[string]bool{}
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			clear(out) // a rerun build reads twice
			for r, err := range l.Records(tx, ListOptions{}) {
				require.NoError(t, err)
				out[r.Key] = r.Compressed
			}
			return nil
		}))
		return out
	}
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	for key, threshold := range map[string]int{"zipped": 0, "whole": -1} {
		l, err := New(db, &Config{CompressThreshold: threshold})
		require.NoError(t, err)
		store(l, key)
	}
	l, err := New(db, nil)
	require.NoError(t, err)
	want := map[string]bool{"zipped": true, "whole": false}
	require.Equal(t, want, compressed(l, db))
	require.NoError(t, db.Close())

	db, l = openSealed(t, path, sealtest.Ring(t, 1))
	defer db.Close()
	n, _ := sealtest.Reseal(t, db, Reseal, 10)
	require.Equal(t, 2, n)
	require.Equal(t, want, compressed(l, db))
	for key := range want {
		got, err := replay(l, key)
		require.NoError(t, err)
		require.Equal(t, body, got.Response.Body)
	}
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}
