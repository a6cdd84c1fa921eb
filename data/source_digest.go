package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// sourceDigest returns a hash of the contents of src that dataset indices depend on,
// for index cache keys: the SHA-256 of an IndexedDataset's .idx file (IndexDigest), or
// for any other source the SHA-256 of its sequence lengths and document boundaries.
// Neither a file's size nor its modification time enters it.
func sourceDigest(src TokenSource) string {
	if d, ok := src.(interface{ IndexDigest() string }); ok {
		return "idx sha256 " + d.IndexDigest()
	}
	h := sha256.New()
	var b [8]byte
	put := func(v int) {
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		h.Write(b[:])
	}
	put(src.NumSequences())
	for i := range src.NumSequences() {
		put(src.SequenceLen(i))
	}
	put(src.NumDocuments())
	for j := range src.NumDocuments() {
		start, end := src.Document(j)
		put(start)
		put(end)
	}
	return "lengths sha256 " + hex.EncodeToString(h.Sum(nil))
}
