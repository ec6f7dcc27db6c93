// Package wire owns fero's byte formats: the length-prefixed frame every
// connection carries, and the change record the partition engine commits and
// fans out. It knows nothing of sockets or of partitions' meaning.
//
// # Frames
//
// A connection is a byte stream of frames. Each frame is
//
//	length  uint32, big-endian: the number of body bytes that follow
//	body    a msgpack array of exactly four elements:
//	          [0] kind    uint   what the frame is (see Kind)
//	          [1] id      uint   call id chosen by the caller; 0 for KindSend
//	          [2] op      uint   operation number; 0 in replies
//	          [3] payload bin    opaque bytes for the layer above
//
// The body is plain msgpack, so any msgpack decoder reads it; integers may
// use any msgpack integer encoding (we write the shortest). A frame whose
// length exceeds the reader's limit, whose body is not exactly one such
// array, or that ends early is an error, and the reader never panics. The
// reader's memory follows the bytes that have arrived, not the length a
// frame declares (at most twice what is buffered, or one block), and with
// a frame timeout a frame must arrive whole within it once begun (see
// Reader).
//
// The payload of a KindError frame is a msgpack array [code uint, message str]
// (then its details, see AppendErrorPayload). The payload of a KindCredit
// frame is [chunks uint, bytes uint]: room the caller of stream id grants
// its callee (transport's flow control).
//
// # Change records
//
// A record is a msgpack array of six elements:
//
//	[0] type       uint  RecordAdd, RecordUpdate or RecordRemove
//	[1] partition  uint
//	[2] epoch      uint  the owner's epoch that committed it
//	[3] offset     uint  position in the partition's changelog
//	[4] key        str
//	[5] value      bin   the msgpack encoding of the value (empty for remove)
//
// Because the value travels as a length-prefixed bin, a receiver learns
// where it starts and ends from the header alone. ParseRecord reads the
// header, keeps the value as a sub-slice of the received bytes (no copy),
// and decodes it only when Record.Value is first called. Routing, acking
// and storing a record therefore never decode its value.
//
// Records may be concatenated in one payload; ParseRecord reports how many
// bytes it consumed.
//
// Values come from the network, so every decode goes through
// ValidateValue first: a value whose containers declare more elements than
// it has bytes, or that nests deeper than MaxValueDepth, is refused before
// the msgpack decoder can be made to allocate gigabytes or recurse without
// end.
//
// Golden byte vectors for every shape live in testdata/; a change to the
// format must change them deliberately (go test -run Golden -update).
package wire
