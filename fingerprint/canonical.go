package fingerprint

import (
	"bytes"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// canonicaliser parses JSON (RFC 8259) and writes its canonical form: no
// insignificant whitespace, object members sorted by key (byte order of the
// UTF-8 key; names that repeat, case-insensitively, are rejected), strings re-escaped
// minimally, numbers copied as written. It is a small recursive-descent
// parser bounded by a nesting depth, so hostile input cannot exhaust the
// stack.
type canonicaliser struct {
	in       []byte
	pos      int
	out      []byte
	scratch  []byte
	key      []byte
	maxDepth int
	// frames keeps, per nesting depth, the members and keys of the object
	// being read there, so that a pooled canonicaliser reads objects
	// without allocating.
	frames []frame
}

type frame struct {
	members []member
	keys    []byte
}

type member struct {
	key        []byte // decoded key, aliasing keyBuf
	start, end int    // the member's canonical bytes in out
	excluded   bool   // parsed, checked for collisions, left out of the output
}

// canonicalise appends the canonical form of in to dst (which may be
// c.out[:0]) and returns it, also left in c.out.
func (c *canonicaliser) canonicalise(dst, in []byte, excl *pathNode, maxDepth int) ([]byte, error) {
	c.in, c.pos, c.out, c.maxDepth = in, 0, dst, maxDepth
	c.ws()
	if err := c.value(excl, 0); err != nil {
		return nil, err
	}
	c.ws()
	if c.pos != len(c.in) {
		return nil, c.errorf("unexpected %q after the top-level value", c.in[c.pos])
	}
	return c.out, nil
}

func (c *canonicaliser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", ErrInvalidJSON, c.pos, fmt.Sprintf(format, args...))
}

func (c *canonicaliser) ws() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicaliser) value(excl *pathNode, depth int) error {
	if c.pos >= len(c.in) {
		return c.errorf("unexpected end of input")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(excl, depth+1)
	case ch == '[':
		return c.array(excl, depth+1)
	case ch == '"':
		var err error
		c.out, err = c.str(c.out)
		return err
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	default:
		return c.errorf("unexpected %q", ch)
	}
}

func (c *canonicaliser) literal(lit string) error {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return c.errorf("invalid literal")
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

func (c *canonicaliser) number() error {
	start := c.pos
	if c.in[c.pos] == '-' {
		c.pos++
	}
	digits := func() int {
		n := 0
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
			n++
		}
		return n
	}
	if c.pos < len(c.in) && c.in[c.pos] == '0' {
		c.pos++
	} else if digits() == 0 {
		return c.errorf("invalid number")
	}
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		c.pos++
		if digits() == 0 {
			return c.errorf("invalid number: no digits after the decimal point")
		}
	}
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		if digits() == 0 {
			return c.errorf("invalid number: no digits in the exponent")
		}
	}
	c.out = append(c.out, c.in[start:c.pos]...)
	return nil
}

func (c *canonicaliser) array(excl *pathNode, depth int) error {
	if depth > c.maxDepth {
		return fmt.Errorf("%w: deeper than %d levels", ErrJSONTooDeep, c.maxDepth)
	}
	c.pos++ // [
	c.out = append(c.out, '[')
	c.ws()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		c.ws()
		if err := c.value(excl, depth); err != nil {
			return err
		}
		c.ws()
		if c.pos >= len(c.in) {
			return c.errorf("unterminated array")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return nil
		default:
			return c.errorf("expected ',' or ']' in array, found %q", c.in[c.pos])
		}
	}
}

func (c *canonicaliser) object(excl *pathNode, depth int) error {
	if depth > c.maxDepth {
		return fmt.Errorf("%w: deeper than %d levels", ErrJSONTooDeep, c.maxDepth)
	}
	c.pos++ // {
	objStart := len(c.out)
	c.out = append(c.out, '{')
	for len(c.frames) <= depth {
		c.frames = append(c.frames, frame{})
	}
	members, keyBuf := c.frames[depth].members[:0], c.frames[depth].keys[:0]
	defer func() {
		// Kept for the next object at this depth, unless one was huge.
		if cap(keyBuf) <= maxPooledBuffer && cap(members) <= maxPooledBuffer/32 {
			c.frames[depth] = frame{members: members[:0], keys: keyBuf[:0]}
		}
	}()
	c.ws()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	for {
		c.ws()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.errorf("expected a string key in object")
		}
		start := len(c.out)
		var err error
		if c.out, err = c.str(c.out); err != nil {
			return err
		}
		// c.key holds the decoded key of the string just read.
		keyOff := len(keyBuf)
		keyBuf = append(keyBuf, c.key...)
		c.ws()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.errorf("expected ':' after object key")
		}
		c.pos++
		c.out = append(c.out, ':')
		c.ws()
		sub := excl.child(keyBuf[keyOff:])
		if err := c.value(sub, depth); err != nil {
			return err
		}
		excluded := sub != nil && sub.leaf
		if excluded {
			c.out = c.out[:start] // excluded: parsed for validity, then dropped
		}
		members = append(members, member{key: keyBuf[keyOff:len(keyBuf):len(keyBuf)], start: start, end: len(c.out), excluded: excluded})
		c.ws()
		if c.pos >= len(c.in) {
			return c.errorf("unterminated object")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] != '}' {
			return c.errorf("expected ',' or '}' in object, found %q", c.in[c.pos])
		}
		c.pos++
		break
	}
	// keyBuf may have been reallocated while appending; re-slice the keys.
	off := 0
	for i := range members {
		n := len(members[i].key)
		members[i].key = keyBuf[off : off+n]
		off += n
	}
	sorted := slices.IsSortedFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	if !sorted {
		slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	}
	if err := collisions(members); err != nil {
		return err
	}
	// Rewrite the members in order, comma-separated, through scratch.
	c.scratch = c.scratch[:0]
	n := 0
	for _, m := range members {
		if m.excluded {
			continue
		}
		if n > 0 {
			c.scratch = append(c.scratch, ',')
		}
		n++
		c.scratch = append(c.scratch, c.out[m.start:m.end]...)
	}
	c.out = append(c.out[:objStart+1], c.scratch...)
	c.out = append(c.out, '}')
	return nil
}

// str reads a JSON string at c.pos, appends its canonical encoding to dst,
// and leaves the decoded bytes in c.key.
func (c *canonicaliser) str(dst []byte) ([]byte, error) {
	c.pos++ // opening quote
	c.key = c.key[:0]
	for {
		if c.pos >= len(c.in) {
			return dst, c.errorf("unterminated string")
		}
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			c.pos++
			return appendCanonicalString(dst, c.key), nil
		case ch == '\\':
			if err := c.escape(); err != nil {
				return dst, err
			}
		case ch < 0x20:
			return dst, c.errorf("control character 0x%02x in string", ch)
		case ch < utf8.RuneSelf:
			c.key = append(c.key, ch)
			c.pos++
		default:
			r, n := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError && n <= 1 {
				return dst, c.errorf("invalid UTF-8 in string")
			}
			c.key = append(c.key, c.in[c.pos:c.pos+n]...)
			c.pos += n
		}
	}
}

// loneSurrogate marks a \uD800-\uDFFF escape without its pair. It is kept as
// an escape in the canonical form (see appendCanonicalString) so that it
// does not collide with U+FFFD.
const loneSurrogateMark = 0xff

func (c *canonicaliser) escape() error {
	if c.pos+1 >= len(c.in) {
		return c.errorf("unterminated escape")
	}
	e := c.in[c.pos+1]
	c.pos += 2
	switch e {
	case '"', '\\', '/':
		c.key = append(c.key, e)
	case 'b':
		c.key = append(c.key, '\b')
	case 'f':
		c.key = append(c.key, '\f')
	case 'n':
		c.key = append(c.key, '\n')
	case 'r':
		c.key = append(c.key, '\r')
	case 't':
		c.key = append(c.key, '\t')
	case 'u':
		r, ok := c.hex4()
		if !ok {
			return c.errorf("invalid \\u escape")
		}
		if utf16.IsSurrogate(r) {
			if r < 0xDC00 && c.pos+1 < len(c.in) && c.in[c.pos] == '\\' && c.in[c.pos+1] == 'u' {
				save := c.pos
				c.pos += 2
				if r2, ok := c.hex4(); ok {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						c.key = utf8.AppendRune(c.key, dec)
						return nil
					}
				}
				c.pos = save
			}
			// A lone surrogate is not a character; keep it distinguishable.
			c.key = append(c.key, loneSurrogateMark, byte(r>>8), byte(r))
			return nil
		}
		c.key = utf8.AppendRune(c.key, r)
	default:
		return c.errorf("invalid escape \\%c", e)
	}
	return nil
}

func (c *canonicaliser) hex4() (rune, bool) {
	if c.pos+4 > len(c.in) {
		return 0, false
	}
	var r rune
	for _, h := range c.in[c.pos : c.pos+4] {
		r <<= 4
		switch {
		case h >= '0' && h <= '9':
			r |= rune(h - '0')
		case h >= 'a' && h <= 'f':
			r |= rune(h - 'a' + 10)
		case h >= 'A' && h <= 'F':
			r |= rune(h - 'A' + 10)
		default:
			return 0, false
		}
	}
	c.pos += 4
	return r, true
}

const hexDigits = "0123456789abcdef"

// appendCanonicalString writes s (decoded, valid UTF-8 plus lone-surrogate
// marks) as a JSON string: '"' and '\' escaped, control characters as \b \f
// \n \r \t or \u00xx, everything else as raw UTF-8.
func appendCanonicalString(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == loneSurrogateMark && i+2 < len(s):
			dst = append(dst, '\\', 'u', hexDigits[s[i+1]>>4], hexDigits[s[i+1]&0xf], hexDigits[s[i+2]>>4], hexDigits[s[i+2]&0xf])
			i += 2
		case ch == '"' || ch == '\\':
			dst = append(dst, '\\', ch)
		case ch == '\b':
			dst = append(dst, '\\', 'b')
		case ch == '\f':
			dst = append(dst, '\\', 'f')
		case ch == '\n':
			dst = append(dst, '\\', 'n')
		case ch == '\r':
			dst = append(dst, '\\', 'r')
		case ch == '\t':
			dst = append(dst, '\\', 't')
		case ch < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[ch>>4], hexDigits[ch&0xf])
		default:
			dst = append(dst, ch)
		}
	}
	return append(dst, '"')
}

// collisions rejects an object with two members whose names are the same to
// encoding/json, which matches a field name case-insensitively (Unicode
// simple folding, as bytes.EqualFold): {"amount_cents":100,"AMOUNT_CENTS":200}
// and the same members swapped decode to different amounts, so keeping both
// would let two different requests share a fingerprint (issue 13, item 6).
// Exact duplicates are rejected for the same reason. Names are compared as
// the decoder reads them: a lone surrogate escape is U+FFFD to it, so
// {"\ud800":1,"\ud801":2} and the same members swapped are one field set
// twice, in two orders, though their canonical forms agree. members is
// sorted.
func collisions(members []member) error {
	if len(members) < 2 {
		return nil
	}
	if len(members) <= 16 {
		var decoded [16][]byte // each name decoded once, on the stack
		names := decoded[:0]
		for _, m := range members {
			names = append(names, decodedName(m.key))
		}
		for i, a := range names {
			for _, b := range names[i+1:] {
				if bytes.EqualFold(a, b) {
					return collision(a, b)
				}
			}
		}
		return nil
	}
	seen := make(map[string][]byte, len(members))
	var fold []byte
	for _, m := range members {
		name := decodedName(m.key)
		fold = foldKey(fold[:0], name)
		if other, dup := seen[string(fold)]; dup {
			return collision(other, name)
		}
		seen[string(fold)] = name
	}
	return nil
}

// decodedName is a member name as encoding/json decodes it: every lone
// surrogate (a mark and two bytes in k) replaced by U+FFFD. k itself when
// it has none, the common case.
func decodedName(k []byte) []byte {
	i := bytes.IndexByte(k, loneSurrogateMark) // never in valid UTF-8
	if i < 0 {
		return k
	}
	out := append([]byte(nil), k[:i]...)
	for ; i < len(k); i++ {
		if k[i] == loneSurrogateMark && i+2 < len(k) {
			out = utf8.AppendRune(out, utf8.RuneError)
			i += 2
			continue
		}
		out = append(out, k[i])
	}
	return out
}

func collision(a, b []byte) error {
	clip := func(k []byte) []byte {
		if len(k) > 64 {
			return append(k[:64:64], "..."...)
		}
		return k
	}
	return fmt.Errorf("%w: %w: object members %q and %q are one field to a case-insensitive JSON decoder (Go's encoding/json); send each field once, in one spelling",
		ErrInvalidJSON, ErrDuplicateMember, clip(a), clip(b))
}

// foldKey appends the case-folded form of k: every rune replaced by the
// smallest rune of its simple-folding orbit, so that foldKey(a) == foldKey(b)
// exactly when bytes.EqualFold(a, b). Bytes that are not valid UTF-8 (lone
// surrogate marks) are kept as they are.
func foldKey(dst, k []byte) []byte {
	for i := 0; i < len(k); {
		c := k[i]
		if c < utf8.RuneSelf {
			// The least of an ASCII letter's orbit is its upper case: K
			// for k and KELVIN SIGN, S for s and LONG S.
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(k[i:])
		if r == utf8.RuneError && n <= 1 {
			dst = append(dst, k[i])
			i++
			continue
		}
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
		i += n
	}
	return dst
}
