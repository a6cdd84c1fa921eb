package data_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"megago/data"
)

// Example_indexedDataset writes a two-document dataset in Megatron's .bin/.idx format and
// reads it back through a memory mapping.
func Example_indexedDataset() {
	dir, err := os.MkdirTemp("", "indexed")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	prefix := filepath.Join(dir, "corpus_text_document")

	b, err := data.NewIndexedBuilder(prefix, data.DTypeForVocab(50257)) // uint16
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	// Writes fail on I/O errors and on ids that do not fit the dtype.
	check := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	check(b.AddSequence([]int32{15496, 995}))                 // document 0, sentence 0
	check(b.AddSequence([]int32{50256}))                      // document 0, sentence 1
	check(b.EndDocument())                                    // end of document 0
	check(b.AddDocument([]int32{464, 3290, 50256}, []int{3})) // document 1, one sentence
	if err := b.Finalize(); err != nil {
		log.Fatal(err)
	}

	ds, err := data.OpenIndexed(prefix, data.ReadMmap)
	if err != nil {
		log.Fatal(err)
	}
	defer ds.Close()
	fmt.Println("dtype:", ds.DType(), "sequences:", ds.NumSequences(), "documents:", ds.NumDocuments())
	for j := range ds.NumDocuments() {
		start, end := ds.Document(j)
		for i := start; i < end; i++ {
			fmt.Printf("doc %d seq %d: %v raw % x\n", j, i, ds.AppendTokens(nil, i, 0, ds.SequenceLen(i)), ds.RawSequence(i))
		}
	}
	// Output:
	// dtype: uint16 sequences: 3 documents: 2
	// doc 0 seq 0: [15496 995] raw 88 3c e3 03
	// doc 0 seq 1: [50256] raw 50 c4
	// doc 1 seq 2: [464 3290 50256] raw d0 01 da 0c 50 c4
}
