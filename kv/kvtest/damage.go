package kvtest

import "iter"

// Damage returns a damaged copy of the stored value v, for fuzz targets
// that change one value and then check every read path: by mode (taken
// modulo 3) v replaced with data, data XORed into v from offset off
// (wrapping), or v cut to off bytes (modulo its length). The result may
// equal v (XOR with zeros, a cut at its length): compare before expecting
// damage to be seen.
func Damage(v []byte, mode uint8, off uint16, data []byte) []byte {
	out := append([]byte(nil), v...)
	switch mode % 3 {
	case 0:
		return append([]byte(nil), data...)
	case 1:
		for j, x := range data {
			if len(out) > 0 {
				out[(int(off)+j)%len(out)] ^= x
			}
		}
	case 2:
		if len(out) > 0 {
			out = out[:int(off)%len(out)]
		}
	}
	return out
}

// Split runs a listing to its end and returns what it yielded apart: the
// values, and the errors (a listing yields one per damaged entry and goes
// on), each in order.
func Split[V any](seq iter.Seq2[V, error]) (vals []V, errs []error) {
	for v, err := range seq {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vals = append(vals, v)
	}
	return vals, errs
}

// Input reads a fuzz input a byte at a time, for targets that decode
// operations (and a fake's answers) from it. Past its end every byte is 0.
type Input struct{ Data []byte }

// Next returns the next byte, or 0 when none is left.
func (in *Input) Next() byte {
	if len(in.Data) == 0 {
		return 0
	}
	b := in.Data[0]
	in.Data = in.Data[1:]
	return b
}

// More reports whether bytes are left.
func (in *Input) More() bool { return len(in.Data) > 0 }
