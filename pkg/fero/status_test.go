package fero

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/fero-go/fero/internal/protocol"
	"github.com/fero-go/fero/internal/wire"
)

// fill sets every field v reaches to a value other than its zero, so
// that a field NodeStatus lacks shows in the re-encoding.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	default:
		panic("fill: " + v.Kind().String())
	}
}

// TestNodeStatusReadsEveryField: every field a node's status answer
// carries (protocol.StatusReport, what serveStatus encodes) lands in
// pkg/fero's own NodeStatus, which re-encodes to the same bytes.
func TestNodeStatusReadsEveryField(t *testing.T) {
	var sent protocol.StatusReport
	n := 0
	fill(reflect.ValueOf(&sent).Elem(), &n)
	b, err := msgpack.Marshal(&sent)
	require.NoError(t, err)
	var got NodeStatus
	require.NoError(t, wire.DecodeValue(b, &got))
	again, err := msgpack.Marshal(&got)
	require.NoError(t, err)
	var back protocol.StatusReport
	require.NoError(t, wire.DecodeValue(again, &back))
	require.Equal(t, sent, back, "a field of the node's status that NodeStatus drops or renames")
}
