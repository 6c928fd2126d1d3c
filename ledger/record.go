package ledger

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/seal"
)

// Status is the state of an idempotency record.
type Status byte

// Record statuses.
const (
	// StatusInProgress: a two-phase attempt has claimed the key and holds a
	// lease; its outside work may be under way.
	StatusInProgress Status = 1
	// StatusCompleted: the work is done and its response is stored for replay.
	StatusCompleted Status = 2
)

func (s Status) String() string {
	switch s {
	case StatusInProgress:
		return "in_progress"
	case StatusCompleted:
		return "completed"
	}
	return fmt.Sprintf("status(%d)", byte(s))
}

// ParseStatus parses the names printed by Status.String.
func ParseStatus(s string) (Status, error) {
	switch s {
	case "in_progress":
		return StatusInProgress, nil
	case "completed":
		return StatusCompleted, nil
	}
	return 0, fmt.Errorf("ledger: unknown status %q (want in_progress or completed)", s)
}

// Response is what a completed request produced and what a replay returns:
// for HTTP, the status code, the headers kept for replay and the body. Code
// that is not HTTP may leave Status and Header empty and use Body alone.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Record is one idempotency-key record.
type Record struct {
	Scope       string
	Key         string
	Status      Status
	Fingerprint Fingerprint
	// Version increases on every claim and takeover; completions are fenced by it.
	Version uint64
	// Owner is the incarnation (kv.DB.Incarnation) that holds the claim.
	Owner          uuid.UUID
	LeaseExpiresAt time.Time // zero once completed
	CreatedAt      time.Time
	CompletedAt    time.Time // zero while in progress
	// ExpiresAt is when the record stops counting: from then on a lookup treats
	// it as absent, whether or not a sweep has deleted it.
	ExpiresAt time.Time
	// Response is the stored response; nil while in progress.
	Response *Response
	// StoredBytes is the size of the encoded record, compressed body included.
	StoredBytes int
	// Compressed reports whether the body is stored zstd-compressed.
	Compressed bool
	// ResponseStatus is the stored response's status (0 while in progress),
	// decoded even when the body is not.
	ResponseStatus int
	// Sealed reports whether the response's headers and body are stored
	// encrypted (kv.Options.Cipher), and KeyID under which key. A record
	// read without that key has Sealed set and a nil Response.
	Sealed bool
	KeyID  uint32

	blob []byte // the sealed response, kept by a check's decode (verify)
}

// Expired reports whether the record is past its retention at now.
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// leaseLive reports whether an in-progress record's lease still holds.
func (r *Record) leaseLive(now time.Time) bool { return now.Before(r.LeaseExpiresAt) }

// Record layout, version 1:
//
//	status byte | fingerprint [32] | version uvarint | owner [16] |
//	lease, created, completed, expires: time |
//	flags byte (1: has response, 2: body compressed, 4: sealed) |
//	[status uvarint | response]
//
// where response is nheaders uvarint | (name, nvalues, values...)... | raw
// body length uvarint | body bytes; sealed, it is instead one bytes field
// holding the response (as a record of its own, layout 1) sealed with the
// key ring (package seal), bound to the record's scope and key. The body is
// compressed before it is sealed.
const recordLayout = 1

const (
	flagResponse   = 1
	flagCompressed = 2
	flagSealed     = 4
)

// responseAAD binds a sealed response to its record.
func responseAAD(scope, key string) []byte { return sealing.AAD("ledger.response", scope, key) }

// bodyMode says how much of a record to decode.
type bodyMode uint8

const (
	// statusOnly: no headers or body (look-ups for status and expiry).
	statusOnly bodyMode = iota
	// bodyIfOpen: the response, unless it is sealed under a key the ring
	// lacks, or there is no ring (Sealed set, Response nil): listings, the
	// check.
	bodyIfOpen
	// bodyRequired: the response; a sealed one that does not open fails
	// with a *seal.OpenError (replays).
	bodyRequired
)

// encodeRecordWith writes r into e, after what e holds (a log entry's
// head: see Ledger.store), and returns e's whole buffer; r.StoredBytes is
// the record's own length. Bodies longer than threshold (when threshold >
// 0) are compressed; with a ring, the response is sealed.
func encodeRecordWith(e *record.Encoder, ring *seal.Ring, r *Record, threshold int) []byte {
	at := len(e.Unfinished())
	e.Nest(record.KindIdempotency, recordLayout)
	e.Byte(byte(r.Status))
	e.Fixed(r.Fingerprint[:])
	e.Uvarint(r.Version)
	e.Fixed(r.Owner[:])
	e.Time(r.LeaseExpiresAt)
	e.Time(r.CreatedAt)
	e.Time(r.CompletedAt)
	e.Time(r.ExpiresAt)
	if r.Response == nil {
		r.Sealed, r.KeyID = false, 0
		e.Byte(0)
		out := e.Finish()
		r.StoredBytes = len(out) - at
		return out
	}
	resp := r.Response
	body := resp.Body
	flags := byte(flagResponse)
	r.Compressed = false
	// A body past the decompression limit stays as it is. This code reads
	// such a body compressed (a writer before the limit stored some), but a
	// reader from before that would refuse it as corrupt.
	if threshold > 0 && len(body) > threshold && len(body) <= maxCompressedBody {
		if c := record.Compress(nil, body); len(c) < len(body) {
			body, flags, r.Compressed = c, flags|flagCompressed, true
		}
	}
	if ring != nil {
		flags |= flagSealed
		r.Sealed, r.KeyID = true, ring.Current()
	} else {
		r.Sealed, r.KeyID = false, 0
	}
	e.Byte(flags)
	e.Uvarint(uint64(resp.Status))
	if ring != nil {
		var inner record.Encoder
		inner.Reset(record.KindIdempotency, recordLayout)
		encodeResponse(&inner, resp, body)
		e.Bytes(ring.Seal(nil, inner.Finish(), responseAAD(r.Scope, r.Key)))
	} else {
		encodeResponse(e, resp, body)
	}
	out := e.Finish()
	r.StoredBytes = len(out) - at
	return out
}

// maxCompressedBody is the largest body a record stores compressed. A
// variable so that a test can write what writers before the limit wrote.
var maxCompressedBody = record.MaxDecompressedSize

// encodedSize is at least the size of r encoded in clear, uncompressed:
// a buffer of that size is allocated once for encodeRecordWith.
func encodedSize(r *Record) int {
	const head = 3 + 1 + 32 + binary.MaxVarintLen64 + 16 + 4*binary.MaxVarintLen64 + 1 + 4
	n := head
	if resp := r.Response; resp != nil {
		n += 3 * binary.MaxVarintLen64 // status, header count, body length
		for name, vs := range resp.Header {
			n += 2*binary.MaxVarintLen64 + len(name)
			for _, v := range vs {
				n += binary.MaxVarintLen64 + len(v)
			}
		}
		n += binary.MaxVarintLen64 + len(resp.Body)
	}
	return n
}

// encodeResponse writes a response's headers and its body (as stored:
// compressed or not).
func encodeResponse(e *record.Encoder, resp *Response, body []byte) {
	var buf [8]string // most responses keep a few headers: no allocation
	names := buf[:0]
	for n := range resp.Header {
		names = append(names, n)
	}
	slices.Sort(names)
	e.Uvarint(uint64(len(names)))
	for _, n := range names {
		e.String(n)
		vs := resp.Header[n]
		e.Uvarint(uint64(len(vs)))
		for _, v := range vs {
			e.String(v)
		}
	}
	e.Uvarint(uint64(len(resp.Body)))
	e.Bytes(body)
}

// decodeRecordAs decodes the stored record of (scope, key). With withBody
// false the response is skipped (cheap look-ups for status and expiry);
// otherwise the body is copied out (and decompressed), so the Record
// outlives the transaction.
func decodeRecordAs(scope, key string, v []byte, withBody bool) (*Record, error) {
	mode := statusOnly
	if withBody {
		mode = bodyIfOpen
	}
	return decodeRecordWith(nil, scope, key, v, mode)
}

// decodeRecordWith decodes a record, opening a sealed response with ring
// as mode asks.
func decodeRecordWith(ring *seal.Ring, scope, key string, v []byte, mode bodyMode) (*Record, error) {
	// One allocation for the record and its response.
	both := &struct {
		Record
		resp Response
	}{}
	r := &both.Record
	var d record.Decoder
	flags, err := decodeHead(&d, r, scope, key, v)
	if err != nil {
		return nil, err
	}
	has, err := decodeResponse(&d, r, &both.resp, ring, scope, key, v, flags, mode)
	if err != nil {
		return nil, err
	}
	if has {
		r.Response = &both.resp
	}
	return r, nil
}

// decodeHead checks v's checksum and decodes the record's fixed part into
// r (status, fingerprint, version, owner, times), leaving d at the
// response; it returns the record's flags. A look-up decides from the
// head whether the response is needed at all.
func decodeHead(d *record.Decoder, r *Record, scope, key string, v []byte) (byte, error) {
	layout, err := d.Reset(record.KindIdempotency, v)
	if err != nil {
		return 0, err
	}
	if layout != recordLayout {
		return 0, d.Fail(fmt.Sprintf("unknown record layout %d", layout))
	}
	*r = Record{StoredBytes: len(v), Scope: scope, Key: key}
	r.Status = Status(d.Byte())
	copy(r.Fingerprint[:], d.Fixed(32))
	r.Version = d.Uvarint()
	copy(r.Owner[:], d.Fixed(16))
	r.LeaseExpiresAt = d.Time()
	r.CreatedAt = d.Time()
	r.CompletedAt = d.Time()
	r.ExpiresAt = d.Time()
	flags := d.Byte()
	if err := d.Err(); err != nil {
		return 0, err
	}
	if r.Status != StatusInProgress && r.Status != StatusCompleted {
		return 0, d.Fail(fmt.Sprintf("unknown status %d", r.Status))
	}
	if flags&^(flagResponse|flagCompressed|flagSealed) != 0 {
		return 0, d.Fail(fmt.Sprintf("unknown flags 0x%02x", flags))
	}
	r.Compressed = flags&flagCompressed != 0
	if flags&flagResponse == 0 && r.Status == StatusCompleted {
		return 0, d.Fail("completed record without a response")
	}
	return flags, nil
}

// decodeResponse decodes the rest of the record whose head decodeHead
// read with d: the response status, then the headers and body as mode
// says, into resp; it reports whether there is a response.
func decodeResponse(d *record.Decoder, r *Record, resp *Response, ring *seal.Ring, scope, key string, v []byte, flags byte, mode bodyMode) (bool, error) {
	if flags&flagResponse == 0 {
		return false, d.Done()
	}
	st := d.Uvarint()
	if st > 999 {
		return false, d.Fail(fmt.Sprintf("response status %d out of range", st))
	}
	r.ResponseStatus = int(st)
	if flags&flagSealed != 0 {
		blob := d.Bytes()
		if err := d.Done(); err != nil {
			return false, err
		}
		id, ok := seal.KeyID(blob)
		if !ok {
			return false, d.Fail("sealed response without the sealed layout")
		}
		r.Sealed, r.KeyID = true, id
		if mode == statusOnly || (mode == bodyIfOpen && (ring == nil || !ring.Has(id))) {
			if mode == bodyIfOpen {
				r.blob = bytes.Clone(blob) // a check verifies it (checkSealed)
			}
			return false, nil
		}
		p, err := ring.Open(nil, blob, responseAAD(scope, key))
		if err != nil {
			return false, err
		}
		// The opened response is a record of its own: decode the rest from it.
		if layout, err := d.Reset(record.KindIdempotency, p); err != nil {
			return false, err
		} else if layout != recordLayout {
			return false, d.Fail(fmt.Sprintf("unknown sealed response layout %d", layout))
		}
		v = p
	} else if mode == statusOnly {
		return false, d.Err()
	}
	*resp = Response{Status: int(st)}
	nh := d.Uvarint()
	if nh > uint64(len(v)) {
		return false, d.Fail(fmt.Sprintf("%d headers in a %d-byte record", nh, len(v)))
	}
	if nh > 0 {
		// Two passes over the header section: the first (on a copy of the
		// decoder) finds its end and counts values; the second makes every
		// name and value a substring of one string. Three allocations in
		// all, whatever the number of headers.
		scan, nvals := *d, uint64(0)
		for i := uint64(0); i < nh && scan.Err() == nil; i++ {
			scan.Bytes()
			nv := scan.Uvarint()
			if nv > uint64(len(v)) {
				return false, scan.Fail(fmt.Sprintf("%d header values in a %d-byte record", nv, len(v)))
			}
			for j := uint64(0); j < nv && scan.Err() == nil; j++ {
				scan.Bytes()
			}
			nvals += nv
		}
		if err := scan.Err(); err != nil {
			return false, err
		}
		hdrStart := d.Offset()
		hs := string(v[hdrStart:scan.Offset()])
		sub := func(b []byte) string { end := d.Offset() - hdrStart; return hs[end-len(b) : end] }
		all := make([]string, 0, nvals)
		resp.Header = make(http.Header, nh)
		for i := uint64(0); i < nh; i++ {
			name := sub(d.Bytes())
			nv := d.Uvarint()
			first := len(all)
			for j := uint64(0); j < nv; j++ {
				all = append(all, sub(d.Bytes()))
			}
			resp.Header[name] = all[first:len(all):len(all)]
		}
	}
	rawLen := d.Uvarint()
	body := d.Bytes()
	if err := d.Done(); err != nil {
		return false, err
	}
	if r.Compressed {
		// Pre-size from the stored length, but never trust it for more than a
		// few times the compressed size: DecodeAll grows the buffer if needed.
		// The stored length bounds the decompression (the checksum vouches
		// for it): a body over record.MaxDecompressedSize comes from a writer
		// before that limit, and is read as it was written.
		out, err := record.DecompressSized(record.KindIdempotency, make([]byte, 0, min(rawLen, uint64(8*len(body)+4096))), body, rawLen)
		if err != nil {
			return false, err
		}
		body = out
	} else {
		body = bytes.Clone(body)
	}
	if uint64(len(body)) != rawLen {
		return false, d.Fail(fmt.Sprintf("body is %d bytes, record says %d", len(body), rawLen))
	}
	if body == nil {
		body = []byte{}
	}
	resp.Body = body
	return true, nil
}
