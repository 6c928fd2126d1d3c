package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

func sampleRecord(body []byte) *Record {
	t := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	return &Record{
		Scope: "acme|POST /v1/orders", Key: "key-1", Status: StatusCompleted,
		Fingerprint: Fingerprint{1, 2, 3}, Version: 7, Owner: uuid.MustParse("7d444840-9dc0-11d1-b245-5ffdce74fad2"),
		CreatedAt: t, CompletedAt: t.Add(time.Second), ExpiresAt: t.Add(24 * time.Hour),
		Response: &Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/orders/1"}}, Body: body},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, body := range [][]byte{{}, []byte(`{"id":1}`), bytes.Repeat([]byte("compress me "), 500)} {
		r := sampleRecord(body)
		var e record.Encoder
		enc := bytes.Clone(encodeRecordWith(&e, nil, r, record.DefaultCompressThreshold))
		got, err := decodeRecord(recordKey(nil, r.Scope, r.Key), enc, true)
		require.NoError(t, err)
		require.Equal(t, r.Compressed, got.Compressed)
		require.Equal(t, len(body) > record.DefaultCompressThreshold, got.Compressed)
		got.StoredBytes, r.StoredBytes = 0, 0
		require.Equal(t, r.Response.Status, got.ResponseStatus)
		got.ResponseStatus = 0
		require.Equal(t, r, got)

		// Every single-bit flip is detected, never misread.
		for i := range enc {
			bad := bytes.Clone(enc)
			bad[i] ^= 1 << (i % 8)
			_, err := decodeRecord(recordKey(nil, r.Scope, r.Key), bad, true)
			require.ErrorIs(t, err, kv.ErrCorrupt, "flip at %d", i)
		}
	}
	inProgress := sampleRecord(nil)
	inProgress.Status, inProgress.Response, inProgress.CompletedAt = StatusInProgress, nil, time.Time{}
	inProgress.LeaseExpiresAt = inProgress.CreatedAt.Add(time.Minute)
	var e record.Encoder
	enc := encodeRecordWith(&e, nil, inProgress, 0)
	require.Equal(t, len(enc), inProgress.StoredBytes, "the encoder reports the stored size")
	got, err := decodeRecord(recordKey(nil, "acme|POST /v1/orders", "key-1"), enc, true)
	require.NoError(t, err)
	require.Equal(t, inProgress, got)
}

// FuzzDecodeRecord: arbitrary bytes under an arbitrary key never panic the
// decoder; whatever decodes re-encodes to a record that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	encode := func(ring *seal.Ring, r *Record, threshold int) []byte {
		var e record.Encoder // a fresh one: encodeRecordWith writes after what e holds
		return encodeRecordWith(&e, ring, r, threshold)
	}
	f.Add([]byte("acme|POST /x\x00k"), encode(nil, sampleRecord([]byte("hello")), 0))
	f.Add([]byte("acme|POST /x\x00k"), encode(nil, sampleRecord(bytes.Repeat([]byte("z"), 3000)), 1024))
	f.Add([]byte("no-separator"), []byte{0xB7, 0x10, 1, 2, 0, 0, 0, 0})
	f.Add([]byte("acme|POST /v1/orders\x00key-1"), encode(fuzzRing, sampleRecord([]byte("hello")), 0))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		fuzzOne(t, key, val)
		// Most random inputs fail the checksum; reseal them so the field
		// parsing behind it is explored too.
		if len(val) >= 7 {
			sealed := bytes.Clone(val)
			body := len(sealed) - 4
			sealed[0], sealed[1] = 0xB7, byte(record.KindIdempotency)
			binary.LittleEndian.PutUint32(sealed[body:], crc32.Checksum(sealed[:body], crc32.MakeTable(crc32.Castagnoli)))
			fuzzOne(t, key, sealed)
		}
	})
}

var fuzzRing, _ = seal.NewRing(sealtest.Key(1))

func fuzzOne(t *testing.T, key, val []byte) {
	{
		// The sealed-value decoder: with the key, a value opens, is
		// refused as corrupt, or fails as a *seal.OpenError; never a panic.
		if scope, k, ok := splitRecordKey(key); ok {
			if _, err := decodeRecordWith(fuzzRing, scope, k, val, bodyRequired); err != nil {
				var oe *seal.OpenError
				if !errors.As(err, &oe) {
					require.ErrorIs(t, err, kv.ErrCorrupt)
				}
			}
		}
		r, err := decodeRecord(key, val, true)
		if err != nil {
			require.ErrorIs(t, err, kv.ErrCorrupt)
			return
		}
		if r.Sealed {
			require.Nil(t, r.Response, "opened without a key")
			return
		}
		var e record.Encoder
		again, err := decodeRecord(key, encodeRecordWith(&e, nil, r, 0), true)
		require.NoError(t, err)
		require.Equal(t, r.Response, again.Response)
		require.Equal(t, r.Version, again.Version)
	}
}

// encodedSize is what a record's buffer is allocated with when none was
// allocated ahead (Ledger.store): it must be at least the encoded size of every record in clear (one allocation), and
// not far above it (no waste on the hot path).
func TestEncodedSizeCoversTheRecord(t *testing.T) {
	many := http.Header{}
	for i := range 40 {
		many[fmt.Sprintf("X-H%d", i)] = []string{strings.Repeat("v", i), "", strings.Repeat("w", 300)}
	}
	for name, r := range map[string]*Record{
		"claim":      {Status: StatusInProgress, Version: 1 << 62, LeaseExpiresAt: time.Unix(1<<40, 0)},
		"no headers": {Status: StatusCompleted, Response: &Response{Status: 999, Body: make([]byte, 1000)}},
		"empty body": {Status: StatusCompleted, Response: &Response{Status: 200, Header: http.Header{"A": {""}}}},
		"many":       {Status: StatusCompleted, Version: 1 << 62, Response: &Response{Status: 201, Header: many, Body: make([]byte, 70000)}},
	} {
		var e record.Encoder
		n := len(encodeRecordWith(&e, nil, r, 0))
		require.GreaterOrEqual(t, encodedSize(r), n, name)
		slack := 200 // the head's and the response's varints at their widest
		if r.Response != nil {
			for _, vs := range r.Response.Header {
				slack += 2*binary.MaxVarintLen64 + len(vs)*binary.MaxVarintLen64
			}
		}
		require.LessOrEqual(t, encodedSize(r), n+slack, name)
	}
}

// A record stored with an informational status (a 103) before such
// statuses were refused is read and replayed as it was stored: the rule is
// for what is written, never for what a file already holds.
func TestARecordStoredWithA1xxIsStillReplayed(t *testing.T) {
	r := sampleRecord([]byte("early"))
	r.Response.Status = 103
	l := storedByAnEarlierWriter(t, r)
	res := replayStored(t, l, r)
	require.Equal(t, 103, res.Response.Status)
	require.Equal(t, "early", string(res.Response.Body))
}

// A body over the decompression limit stored compressed (as writers did
// before they kept to the limit) is read and replayed, bounded by the
// length the record states; a record stating more than any value bbolt
// holds is refused as corrupt, not decompressed.
func TestABodyCompressedPastTheLimitIsStillReplayed(t *testing.T) {
	body := bytes.Repeat([]byte("a"), record.MaxDecompressedSize+1)
	r := sampleRecord(body)
	// The writer before the limit; put back even if storing fails.
	maxCompressedBody = math.MaxInt
	t.Cleanup(func() { maxCompressedBody = record.MaxDecompressedSize })
	l := storedByAnEarlierWriter(t, r)
	require.True(t, r.Compressed, "stored compressed, as earlier writers did")
	res := replayStored(t, l, r)
	require.True(t, bytes.Equal(body, res.Response.Body), "the body replayed whole")
	problems, err := l.db.Check(context.Background(), RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems, "the check reads it too")

}

// storedByAnEarlierWriter stores r as it encodes, under its scope and key,
// through the record store and counted in its tenant's usage (no rule of
// today's writer applied), then opens
// the file afresh and returns a ledger over it.
func storedByAnEarlierWriter(t *testing.T, r *Record) *Ledger {
	t.Helper()
	path := filepath.Join(t.TempDir(), "l.db")
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	l, err := New(db, nil)
	require.NoError(t, err)
	r.CreatedAt, r.CompletedAt = db.Clock().Now(), db.Clock().Now()
	r.ExpiresAt = r.CreatedAt.Add(time.Hour)
	var e record.Encoder
	v := bytes.Clone(encodeRecordWith(&e, nil, r, record.DefaultCompressThreshold))
	require.NoError(t, db.Update(context.Background(), func(tx kv.Tx) error {
		if _, err := l.records.Put(context.Background(), tx, r.Scope, r.Key, recstore.Ref{}, time.Time{}, r.ExpiresAt, v); err != nil {
			return err
		}
		return accountAround(tx, r.Scope, r.Key, 1, int64(len(v)))
	}))
	require.NoError(t, db.Close())

	db, err = kv.Open(path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	l, err = New(db, nil)
	require.NoError(t, err)
	return l
}

// replayStored retries r's request on l and requires the stored answer back,
// the work not run.
func replayStored(t *testing.T, l *Ledger, r *Record) Result {
	t.Helper()
	ran := false
	res, err := l.Do(context.Background(), Request{Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint}, func(kv.Tx) (Response, error) {
		ran = true
		return Response{Status: 200}, nil
	})
	require.NoError(t, err)
	require.False(t, ran, "the stored answer is replayed, the work not run")
	require.True(t, res.Replayed)
	return res
}
