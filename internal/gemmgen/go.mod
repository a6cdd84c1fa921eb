module megago/internal/gemmgen

go 1.26.0
