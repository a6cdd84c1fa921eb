module megago

go 1.26.0
