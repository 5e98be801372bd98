//! The vectors file beside the search index (`catalog.db` -> `catalog.vectors`): each text's vector under the hash of the text, appended as made, so a restart or a re-walk never embeds an unchanged entry again.
//!
//! Layout: a 32-byte header (magic, the model's fingerprint, the dimensions), then records of
//! `key: u64, checksum: u64, dimensions x f32`, all little-endian. The file is derived state:
//! a header of another model or version empties it, a record whose checksum fails (a torn
//! append after a crash) ends what is read and is cut off, and a file with more dead records
//! than live ones is rewritten (into a temporary file renamed over it).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::SemanticError;

const MAGIC: &[u8; 8] = b"MCPMVEC1";
const HEADER_BYTES: u64 = 32;

/// The vectors known, by text hash, and the file they are kept in.
pub struct VectorFile {
    path: PathBuf,
    fingerprint: u64,
    dimensions: usize,
    vectors: HashMap<u64, Box<[f32]>>,
    /// Records in the file, live or not (a key written twice counts twice).
    records: usize,
    writer: Option<BufWriter<File>>,
}

/// The vectors file of database `database`.
pub fn path_for(database: &Path) -> PathBuf {
    database.with_extension("vectors")
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl Fn(std::io::Error) -> SemanticError + 'a {
    move |source| SemanticError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn header(fingerprint: u64, dimensions: usize) -> [u8; HEADER_BYTES as usize] {
    let mut bytes = [0u8; HEADER_BYTES as usize];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&fingerprint.to_le_bytes());
    bytes[16..20].copy_from_slice(&(dimensions as u32).to_le_bytes());
    bytes
}

fn checksum(values: &[f32]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for value in values {
        hasher.update(&value.to_le_bytes());
    }
    hasher.digest()
}

impl VectorFile {
    /// Opens (or starts) the file at `path` for the model `fingerprint` of `dimensions`.
    pub fn open(
        path: &Path,
        fingerprint: u64,
        dimensions: usize,
    ) -> Result<VectorFile, SemanticError> {
        let mut vectors = HashMap::new();
        let mut records = 0usize;
        let mut valid_bytes = 0u64;
        if let Ok(file) = File::open(path) {
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut head = [0u8; HEADER_BYTES as usize];
            if reader.read_exact(&mut head).is_ok() && head == header(fingerprint, dimensions) {
                valid_bytes = HEADER_BYTES;
                let mut record = vec![0u8; 16 + 4 * dimensions];
                while reader.read_exact(&mut record).is_ok() {
                    let key = u64::from_le_bytes(record[..8].try_into().expect("8 bytes"));
                    let sum = u64::from_le_bytes(record[8..16].try_into().expect("8 bytes"));
                    let values: Box<[f32]> = record[16..]
                        .chunks_exact(4)
                        .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                        .collect();
                    if checksum(&values) != sum {
                        break;
                    }
                    vectors.insert(key, values);
                    records += 1;
                    valid_bytes += record.len() as u64;
                }
            }
        }
        let mut file = VectorFile {
            path: path.to_path_buf(),
            fingerprint,
            dimensions,
            vectors,
            records,
            writer: None,
        };
        if valid_bytes == 0 {
            file.rewrite()?;
        } else {
            let handle = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_error("open", path))?;
            // Cut a torn or unreadable tail, so appends follow the last good record.
            handle
                .set_len(valid_bytes)
                .map_err(io_error("truncate", path))?;
            let mut handle = handle;
            std::io::Seek::seek(&mut handle, std::io::SeekFrom::End(0))
                .map_err(io_error("seek in", path))?;
            file.writer = Some(BufWriter::new(handle));
            if file.records > 2 * file.vectors.len() + 1024 {
                file.rewrite()?;
            }
        }
        Ok(file)
    }

    pub fn get(&self, key: u64) -> Option<&[f32]> {
        self.vectors.get(&key).map(|values| &values[..])
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    /// Keeps `values` under `key`, appended to the file (written out at the next `flush`).
    pub fn insert(&mut self, key: u64, values: Vec<f32>) -> Result<(), SemanticError> {
        debug_assert_eq!(values.len(), self.dimensions);
        if let Some(writer) = &mut self.writer {
            let mut record = Vec::with_capacity(16 + 4 * values.len());
            record.extend_from_slice(&key.to_le_bytes());
            record.extend_from_slice(&checksum(&values).to_le_bytes());
            for value in &values {
                record.extend_from_slice(&value.to_le_bytes());
            }
            writer
                .write_all(&record)
                .map_err(io_error("append to", &self.path))?;
            self.records += 1;
        }
        self.vectors.insert(key, values.into_boxed_slice());
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), SemanticError> {
        if let Some(writer) = &mut self.writer {
            writer.flush().map_err(io_error("write", &self.path))?;
        }
        Ok(())
    }

    /// Forgets every vector whose key `keep` refuses, and rewrites the file when most of its
    /// records are dead.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) -> Result<(), SemanticError> {
        self.vectors.retain(|key, _| keep(*key));
        if self.records > 2 * self.vectors.len() + 1024 {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Writes the live vectors to a new file and renames it over the old one.
    fn rewrite(&mut self) -> Result<(), SemanticError> {
        self.writer = None;
        let mut temporary = self.path.clone().into_os_string();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        let file = File::create(&temporary).map_err(io_error("create", &temporary))?;
        let mut writer = BufWriter::new(file);
        writer
            .write_all(&header(self.fingerprint, self.dimensions))
            .map_err(io_error("write", &temporary))?;
        let mut keys: Vec<u64> = self.vectors.keys().copied().collect();
        keys.sort_unstable();
        for key in &keys {
            let values = &self.vectors[key];
            writer
                .write_all(&key.to_le_bytes())
                .and_then(|()| writer.write_all(&checksum(values).to_le_bytes()))
                .map_err(io_error("write", &temporary))?;
            for value in values.iter() {
                writer
                    .write_all(&value.to_le_bytes())
                    .map_err(io_error("write", &temporary))?;
            }
        }
        let file = writer.into_inner().map_err(|error| SemanticError::Io {
            action: "write",
            path: temporary.clone(),
            source: error.into_error(),
        })?;
        file.sync_all().map_err(io_error("sync", &temporary))?;
        std::fs::rename(&temporary, &self.path).map_err(io_error("rename", &self.path))?;
        self.records = keys.len();
        let handle = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io_error("open", &self.path))?;
        self.writer = Some(BufWriter::new(handle));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_survive_a_reopen_and_a_torn_tail_is_cut() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.vectors");
        {
            let mut file = VectorFile::open(&path, 7, 3).expect("opens");
            file.insert(1, vec![1.0, 2.0, 3.0]).expect("inserts");
            file.insert(2, vec![4.0, 5.0, 6.0]).expect("inserts");
            file.flush().expect("flushes");
        }
        // A crash mid-append leaves half a record.
        let mut raw = OpenOptions::new().append(true).open(&path).expect("opens");
        raw.write_all(&[9u8; 20]).expect("writes");
        drop(raw);
        let mut file = VectorFile::open(&path, 7, 3).expect("reopens");
        assert_eq!(file.len(), 2);
        assert_eq!(file.get(2), Some(&[4.0, 5.0, 6.0][..]));
        file.insert(3, vec![7.0, 8.0, 9.0]).expect("inserts");
        file.flush().expect("flushes");
        drop(file);
        let file = VectorFile::open(&path, 7, 3).expect("reopens");
        assert_eq!(file.len(), 3);
        assert_eq!(file.get(3), Some(&[7.0, 8.0, 9.0][..]));
        // Another model's vectors are never read.
        let other = VectorFile::open(&path, 8, 3).expect("opens for another model");
        assert_eq!(other.len(), 0);
    }

    #[test]
    fn dead_records_are_dropped_by_a_rewrite() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("catalog.vectors");
        let mut file = VectorFile::open(&path, 1, 1).expect("opens");
        for key in 0..3000u64 {
            file.insert(key, vec![key as f32]).expect("inserts");
        }
        file.retain(|key| key < 10).expect("retains");
        file.flush().expect("flushes");
        drop(file);
        let length = std::fs::metadata(&path).expect("exists").len();
        assert_eq!(length, HEADER_BYTES + 10 * (16 + 4));
        let file = VectorFile::open(&path, 1, 1).expect("reopens");
        assert_eq!(file.len(), 10);
    }
}
