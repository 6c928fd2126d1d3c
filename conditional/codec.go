package conditional

import "encoding/json"

// Codec turns values into bytes and back. Encodings must be deterministic:
// Assign compares encodings to decide whether anything changed.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(data []byte) (T, error)
}

// JSON is the default Codec: encoding/json.
type JSON[T any] struct{}

// Encode marshals v with encoding/json.
func (JSON[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

// Decode unmarshals data with encoding/json.
func (JSON[T]) Decode(data []byte) (T, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}
