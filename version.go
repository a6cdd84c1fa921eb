package megago

// Version is megago's release version, printed by megago version and recorded in checkpoints.
const Version = "0.1.0-dev"
