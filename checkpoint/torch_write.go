package checkpoint

import (
	"archive/zip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
)

// Writing torch.save files (the zip format of PyTorch ≥ 1.6), as torch.save writes them
// for torch.load: records <prefix>/data.pkl (the pickle, protocol 2), <prefix>/byteorder
// ("little"), <prefix>/data/<key> (each storage's bytes) and <prefix>/version ("3"),
// stored uncompressed, each record's data aligned to 64 bytes by an extra field of
// padding as PyTorch's writer pads it (so torch.load can memory-map them).

// torchAlign is the alignment of record data in PyTorch's zip writer.
const torchAlign = 64

// torchPadHeader is the id of the extra field PyTorch pads local headers with ("FB").
const torchPadHeader = 0x4246

// writeTorchZip writes v (see pickler for the values it may hold) to w as a torch.save
// file whose records are under prefix (torch.save uses the file name without its
// extension).
func writeTorchZip(w io.Writer, prefix string, v any) error {
	pkl, storages := picklePayload(v)
	cw := &countWriter{w: w}
	zw := zip.NewWriter(cw)
	add := func(name string, data []byte) error {
		if err := zw.Flush(); err != nil {
			return err
		}
		name = prefix + "/" + name
		const localHeader = 30
		at := cw.n + localHeader + int64(len(name)) + 4 // + the pad field's own header
		pad := (torchAlign - at%torchAlign) % torchAlign
		extra := binary.LittleEndian.AppendUint16(nil, torchPadHeader)
		extra = binary.LittleEndian.AppendUint16(extra, uint16(pad))
		for range pad {
			extra = append(extra, 'Z')
		}
		f, err := zw.CreateRaw(&zip.FileHeader{Name: name, Method: zip.Store, Extra: extra,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data))})
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		return err
	}
	names, records := []string{"data.pkl", "byteorder"}, [][]byte{pkl, []byte("little")}
	for i, s := range storages {
		names, records = append(names, "data/"+strconv.Itoa(i)), append(records, s.Data)
	}
	names, records = append(names, "version"), append(records, []byte("3\n"))
	for i, name := range names {
		if err := add(name, records[i]); err != nil {
			return fmt.Errorf("checkpoint: writing a torch archive: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("checkpoint: writing a torch archive: %w", err)
	}
	return nil
}
