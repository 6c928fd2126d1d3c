package idemhttp

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// capture is a ResponseWriter that buffers the response so it can be
// stored, and released only after the transaction commits. A fresh capture
// is used for every run of a handler (group commit may run it twice).
type capture struct {
	header      http.Header
	sent        http.Header // header as the status was written (nil before)
	status      int
	body        bytes.Buffer
	wroteHeader bool
	limit       int
	overflow    bool
	badStatus   int  // a status outside 100-999 (net/http would panic on it), or a 101
	noStore     bool // the handler called DoNotStore

	// scope and key name the request whose handler writes into it
	// (unkeyed, when it has no key), since when it has run, and whether a
	// request waiting behind it has said so (reportHolder).
	scope, key string
	unkeyed    *http.Request
	since      time.Time
	reported   atomic.Bool
}

// DoNotStore marks the response an in-transaction handler (Wrap) is
// writing as a rejection that must not be stored: the transaction rolls
// back with the handler's writes and a retry with the same key runs again
// (Stripe's rule for requests that fail validation). Call it with the
// ResponseWriter the middleware handed in; elsewhere it does nothing. A 4xx
// answer from a handler that wrote nothing is treated this way without it.
func DoNotStore(w http.ResponseWriter) {
	if c, ok := w.(*capture); ok {
		c.noStore = true
	}
}

func newCapture(limit int) *capture { return &capture{header: http.Header{}, limit: limit} }

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.wroteHeader {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An informational status (103 Early Hints, 100 Continue) is not
		// the answer: net/http sends it at once and the final status
		// follows. Nothing leaves before the commit, so it is dropped;
		// the headers set so far stay for the final status, as they do
		// in net/http.
		return
	}
	if code < 100 || code > 999 || code == http.StatusSwitchingProtocols {
		// net/http panics on a status outside 100-999; a 101 hands the
		// connection over to another protocol, which a stored answer
		// cannot replay (and the ledger refuses every 1xx).
		c.badStatus = code
		code = http.StatusInternalServerError
	}
	// net/http sends the header with the status: later changes to it are
	// dropped (trailers excepted), so they are here too.
	c.wroteHeader, c.status, c.sent = true, code, c.header.Clone()
}

// sentHeader is the header the response carries, as net/http would send
// it: the fields as they were when the status was written (all of them if
// it never was), and the trailers as they are at the end.
func (c *capture) sentHeader() http.Header {
	if c.sent == nil {
		return c.header
	}
	declared := c.sent["Trailer"]
	for k, v := range c.header {
		if isTrailer(k, declared) {
			c.sent[k] = v
		}
	}
	return c.sent
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	if c.limit > 0 && c.body.Len()+len(p) > c.limit {
		c.overflow = true
		return 0, errResponseTooLarge
	}
	return c.body.Write(p)
}

// Flush is accepted and ignored: a stored response cannot stream.
func (c *capture) Flush() {}

func (c *capture) statusCode() int {
	if !c.wroteHeader {
		return http.StatusOK
	}
	return c.status
}

// writeTo sends the captured response to the real writer.
func (c *capture) writeTo(w http.ResponseWriter) {
	send(w, c.sentHeader(), c.statusCode(), c.body.Bytes())
}

// send writes a response: its header fields, the status, the body, then
// its trailers, as net/http sends them: the fields named in its Trailer
// header, and those set under http.TrailerPrefix. Set before the status,
// a trailer would leave as a header field too.
func send(w http.ResponseWriter, header http.Header, status int, body []byte) {
	h := w.Header()
	declared := header["Trailer"]
	trailers := false
	for k, v := range header {
		if isTrailer(k, declared) {
			trailers = true
			continue
		}
		h[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if !trailers {
		return
	}
	for k, v := range header {
		if isTrailer(k, declared) {
			h[k] = v
		}
	}
}

// isTrailer reports whether the field k of a handler's header is a
// trailer: set under http.TrailerPrefix, or named in the Trailer header
// (declared, a comma-separated list of names).
func isTrailer(k string, declared []string) bool {
	if strings.HasPrefix(k, http.TrailerPrefix) {
		return true
	}
	for _, list := range declared {
		for name := range strings.SplitSeq(list, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(name)) == k {
				return true
			}
		}
	}
	return false
}
