package kvtest

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
