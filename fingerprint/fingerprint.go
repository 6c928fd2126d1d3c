package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/oncekv/oncekv/ledger"
)

// DefaultMaxJSONDepth is how deeply a JSON body may nest before the
// Fingerprinter rejects it with ErrJSONTooDeep.
const DefaultMaxJSONDepth = 64

// Options configure a Fingerprinter.
type Options struct {
	// Exclude lists JSON fields left out of the fingerprint, as dot-separated
	// paths through objects: "client_ts", "meta.request_id". Arrays are
	// transparent: "items.note" excludes the note of every element of items.
	Exclude []string

	// MaxDepth bounds JSON nesting. 0 means DefaultMaxJSONDepth.
	MaxDepth int
}

// Fingerprinter computes request fingerprints. JSON bodies (a Content-Type
// of application/json or any +json type) are canonicalised first: objects
// with their keys sorted, insignificant whitespace removed, strings
// re-escaped minimally, numbers kept exactly as written, and excluded fields
// removed; an object that repeats a member name, case-insensitively as Go's
// encoding/json matches them, is rejected (ErrDuplicateMember). Other bodies
// are hashed as bytes. A Fingerprinter is safe for
// concurrent use.
type Fingerprinter struct {
	exclude  *pathNode
	maxDepth int
}

// New validates opts and returns a Fingerprinter. nil means defaults.
func New(opts *Options) (*Fingerprinter, error) {
	if opts == nil {
		opts = &Options{}
	}
	f := &Fingerprinter{maxDepth: opts.MaxDepth}
	if f.maxDepth == 0 {
		f.maxDepth = DefaultMaxJSONDepth
	}
	if f.maxDepth < 0 {
		return nil, fmt.Errorf("%w: MaxDepth %d is negative", ErrInvalidOptions, opts.MaxDepth)
	}
	for _, p := range opts.Exclude {
		segs := strings.Split(p, ".")
		for _, s := range segs {
			if s == "" {
				return nil, fmt.Errorf("%w: exclude path %q has an empty segment", ErrInvalidOptions, p)
			}
		}
		if f.exclude == nil {
			f.exclude = &pathNode{}
		}
		f.exclude.add(segs)
	}
	return f, nil
}

// Errors returned by a Fingerprinter.
var (
	// ErrInvalidJSON is returned for a body declared as JSON that does not
	// parse.
	ErrInvalidJSON = errors.New("fingerprint: invalid JSON body")

	// ErrDuplicateMember is returned (together with ErrInvalidJSON) for a
	// JSON object with two members of the same name, case-insensitively:
	// Go's encoding/json would read them as one field.
	ErrDuplicateMember = errors.New("fingerprint: JSON object repeats a member name")

	// ErrJSONTooDeep is returned for a JSON body nested deeper than
	// Options.MaxDepth.
	ErrJSONTooDeep = errors.New("fingerprint: JSON body nested too deeply")

	// ErrInvalidOptions is returned by New for Options that fail validation.
	ErrInvalidOptions = errors.New("fingerprint: invalid options")
)

// Fingerprint kinds, mixed into the hash so a JSON body and a byte body with
// the same text cannot collide.
const (
	kindBytes byte = 'b'
	kindJSON  byte = 'j'
)

var canonPool = sync.Pool{New: func() any { return &canonicaliser{} }}

// Sum returns the fingerprint of a request. target is the request's concrete
// target, not its route pattern: the escaped path and, when there is one, the
// raw query (r.URL.RequestURI() for an *http.Request), so a key reused on
// another resource ("/v1/orders/B/pay" after "/v1/orders/A/pay") or with
// another query is a mismatch, never a replay of the other answer.
//
// A body whose Content-Type is JSON but which does not parse returns an error
// wrapping ErrInvalidJSON (or ErrJSONTooDeep); it is never silently hashed as
// bytes. A blank body (empty, or only JSON whitespace) holds no value: it is
// hashed as bytes whatever the Content-Type, so a request with no body is
// the same request with or without a JSON Content-Type.
func (f *Fingerprinter) Sum(method, target, contentType string, body []byte) (ledger.Fingerprint, error) {
	// What is hashed, in order: "oncekv/fp/1", the method and the target
	// (each length-prefixed), a kind byte, and the body as bytes or in
	// canonical JSON. It is gathered in one pooled buffer and hashed at
	// once: the same bytes as a streaming hash, without its allocations.
	c := canonPool.Get().(*canonicaliser)
	defer func() {
		if cap(c.out) > maxPooledBuffer {
			c.out = nil // a huge body's buffer is not kept, valid or not
		}
		canonPool.Put(c)
	}()
	buf := append(c.out[:0], "oncekv/fp/1"...)
	buf = binary.AppendUvarint(buf, uint64(len(method)))
	buf = append(buf, method...)
	buf = binary.AppendUvarint(buf, uint64(len(target)))
	buf = append(buf, target...)
	if !IsJSON(contentType) || isBlank(body) {
		buf = append(append(buf, kindBytes), body...)
	} else {
		var err error
		if buf, err = c.canonicalise(append(buf, kindJSON), body, f.exclude, f.maxDepth); err != nil {
			return ledger.Fingerprint{}, err
		}
	}
	c.out = buf
	return ledger.Fingerprint(sha256.Sum256(buf)), nil
}

// maxPooledBuffer bounds the buffers a pooled canonicaliser keeps.
const maxPooledBuffer = 64 << 10

// Canonical returns the canonical form of a JSON body as the Fingerprinter
// hashes it. It is exported for tests and for debugging mismatches.
func (f *Fingerprinter) Canonical(body []byte) ([]byte, error) {
	var c canonicaliser
	out, err := c.canonicalise(nil, body, f.exclude, f.maxDepth)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), out...), nil
}

// BodyType is the content type to give Sum for a request with header h:
// its Content-Type, or "" when a Content-Encoding other than identity
// (gzip, say) is set. Such a body is not the text its type names, so it is
// fingerprinted as the bytes sent instead of refused as invalid JSON; a
// retry must then compress alike.
func BodyType(h http.Header) string {
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
		return ""
	}
	return h.Get("Content-Type")
}

// IsJSON reports whether a Content-Type names JSON: application/json or a
// structured +json type, with any parameters.
func IsJSON(contentType string) bool {
	switch contentType {
	case "":
		return false
	case "application/json", "application/json; charset=utf-8":
		return true // what mime.ParseMediaType says of them, without its map
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// pathNode is a trie of excluded field paths.
type pathNode struct {
	children map[string]*pathNode
	leaf     bool // the path ends here: the field is excluded
}

func (n *pathNode) add(segs []string) {
	for _, s := range segs {
		if n.children == nil {
			n.children = map[string]*pathNode{}
		}
		c := n.children[s]
		if c == nil {
			c = &pathNode{}
			n.children[s] = c
		}
		n = c
	}
	n.leaf = true
}

func (n *pathNode) child(key []byte) *pathNode {
	if n == nil || n.children == nil {
		return nil
	}
	return n.children[string(key)]
}
