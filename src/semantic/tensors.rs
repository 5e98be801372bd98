//! Reads the tensors of a `model.safetensors` file into `f32` vectors, one at a time, so loading never holds the file and its copy at once.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::SemanticError;

/// The longest header a safetensors file may declare (its JSON table of tensors).
const MAX_HEADER_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Deserialize)]
struct TensorInfo {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

/// Opens a file of a model directory for reading: a regular file only. A FIFO (or a device, or
/// a socket) would hold the load forever, with semantic search "loading" for good: the name is
/// checked before the open, the open does not block (a FIFO with no writer opens at once), and
/// the file opened is checked again (the name may have been replaced in between). Symbolic
/// links to regular files are followed (a Hugging Face cache links its files to blobs).
pub(crate) fn open_regular_file(path: &Path) -> Result<File, SemanticError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| SemanticError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let not_regular = |file_type: std::fs::FileType| {
        SemanticError::Model(format!(
            "{}: not a regular file ({}); a model directory holds regular files only",
            path.display(),
            file_type_name(file_type)
        ))
    };
    let before = std::fs::metadata(path).map_err(io)?;
    if !before.is_file() {
        return Err(not_regular(before.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let opened = file.metadata().map_err(io)?;
    if !opened.is_file() {
        return Err(not_regular(opened.file_type()));
    }
    Ok(file)
}

/// What a file that is not a regular file is, for the error.
fn file_type_name(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() || file_type.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// An open safetensors file: its table of tensors, and the file to read them from.
pub struct TensorFile {
    path: PathBuf,
    file: File,
    data_start: u64,
    file_length: u64,
    tensors: HashMap<String, TensorInfo>,
    /// XXH3 of the header and the file's length: another export of the weights differs here.
    header_digest: u64,
}

impl TensorFile {
    pub fn open(path: &Path) -> Result<TensorFile, SemanticError> {
        let io = |source| SemanticError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        };
        let mut file = open_regular_file(path)?;
        let mut length = [0u8; 8];
        file.read_exact(&mut length).map_err(io)?;
        let header_bytes = u64::from_le_bytes(length);
        if header_bytes > MAX_HEADER_BYTES {
            return Err(SemanticError::Model(format!(
                "{}: a safetensors header of {header_bytes} bytes is over the {MAX_HEADER_BYTES} this reads",
                path.display()
            )));
        }
        let file_length = file.metadata().map_err(io)?.len();
        if 8 + header_bytes > file_length {
            return Err(SemanticError::Model(format!(
                "{}: a safetensors header of {header_bytes} bytes is past the end of the file ({file_length} bytes)",
                path.display()
            )));
        }
        let mut header = vec![0u8; header_bytes as usize];
        file.read_exact(&mut header).map_err(io)?;
        let table: HashMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|error| {
                SemanticError::Model(format!(
                    "{}: not a safetensors file: {error}",
                    path.display()
                ))
            })?;
        let mut digest = xxhash_rust::xxh3::Xxh3::new();
        digest.update(&header);
        digest.update(&file_length.to_le_bytes());
        let mut tensors = HashMap::new();
        for (name, value) in table {
            if name == "__metadata__" {
                continue;
            }
            let info: TensorInfo = serde_json::from_value(value).map_err(|error| {
                SemanticError::Model(format!("{}: tensor {name}: {error}", path.display()))
            })?;
            tensors.insert(name, info);
        }
        Ok(TensorFile {
            path: path.to_path_buf(),
            file,
            data_start: 8 + header_bytes,
            file_length,
            tensors,
            header_digest: digest.digest(),
        })
    }

    pub fn header_digest(&self) -> u64 {
        self.header_digest
    }

    /// The first of `names` the file has (models differ in a `bert.` prefix).
    pub fn find<'a>(&self, names: &[&'a str]) -> Option<&'a str> {
        names
            .iter()
            .copied()
            .find(|name| self.tensors.contains_key(*name))
    }

    /// Reads tensor `name` as `f32`s, checking that its shape is `shape`.
    pub fn read(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>, SemanticError> {
        let info = self.tensors.get(name).ok_or_else(|| {
            SemanticError::Model(format!("{}: no tensor {name}", self.path.display()))
        })?;
        if info.shape != shape {
            return Err(SemanticError::Model(format!(
                "{}: tensor {name} has shape {:?}, expected {shape:?}",
                self.path.display(),
                info.shape
            )));
        }
        let count = shape
            .iter()
            .try_fold(1usize, |count, side| count.checked_mul(*side))
            .ok_or_else(|| {
                SemanticError::Model(format!(
                    "{}: tensor {name}'s shape {shape:?} is too large",
                    self.path.display()
                ))
            })?;
        let width = match info.dtype.as_str() {
            "F32" => 4,
            "F16" | "BF16" => 2,
            other => {
                return Err(SemanticError::Model(format!(
                    "{}: tensor {name} is {other}; F32, F16 and BF16 are read",
                    self.path.display()
                )))
            }
        };
        let (start, end) = info.data_offsets;
        let bytes = count.checked_mul(width).map(|bytes| bytes as u64);
        if bytes.is_none() || end.checked_sub(start) != bytes {
            return Err(SemanticError::Model(format!(
                "{}: tensor {name}'s offsets do not match its shape",
                self.path.display()
            )));
        }
        // Nothing is allocated for a tensor the file does not hold: a header may claim any size.
        if self
            .data_start
            .checked_add(end)
            .map_or(true, |end| end > self.file_length)
        {
            return Err(SemanticError::Model(format!(
                "{}: tensor {name} ends past the end of the file ({} bytes)",
                self.path.display(),
                self.file_length
            )));
        }
        let dtype = info.dtype.clone();
        let path = self.path.clone();
        let io = |source| SemanticError::Io {
            action: "read",
            path: path.clone(),
            source,
        };
        self.file
            .seek(SeekFrom::Start(self.data_start + start))
            .map_err(io)?;
        let mut values = Vec::with_capacity(count);
        let mut chunk = vec![0u8; 64 * 1024];
        let mut left = count * width;
        while left > 0 {
            let take = left.min(chunk.len());
            self.file.read_exact(&mut chunk[..take]).map_err(io)?;
            match dtype.as_str() {
                "F32" => values.extend(
                    chunk[..take]
                        .chunks_exact(4)
                        .map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
                ),
                "BF16" => values.extend(chunk[..take].chunks_exact(2).map(|bytes| {
                    f32::from_bits(u32::from(u16::from_le_bytes([bytes[0], bytes[1]])) << 16)
                })),
                _ => values.extend(
                    chunk[..take]
                        .chunks_exact(2)
                        .map(|bytes| half_to_f32(u16::from_le_bytes([bytes[0], bytes[1]]))),
                ),
            }
            left -= take;
        }
        Ok(values)
    }
}

/// IEEE 754 half precision to single, subnormals included.
fn half_to_f32(half: u16) -> f32 {
    let sign = u32::from(half >> 15) << 31;
    let exponent = u32::from((half >> 10) & 0x1f);
    let mantissa = u32::from(half & 0x3ff);
    let bits = match (exponent, mantissa) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalize the mantissa.
            let shift = mantissa.leading_zeros() - 21;
            let mantissa = (mantissa << shift) & 0x3ff;
            sign | ((113 - shift) << 23) | (mantissa << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (mantissa << 13),
        _ => sign | ((exponent + 112) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::{half_to_f32, TensorFile};

    /// A safetensors file of `header` (the tensor table) and `data` bytes after it.
    fn file(
        dir: &tempfile::TempDir,
        header: &str,
        declared: Option<u64>,
        data: usize,
    ) -> std::path::PathBuf {
        let path = dir.path().join("model.safetensors");
        let mut bytes = declared
            .unwrap_or(header.len() as u64)
            .to_le_bytes()
            .to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data));
        std::fs::write(&path, bytes).expect("write");
        path
    }

    fn error(result: Result<Vec<f32>, super::SemanticError>) -> String {
        result.expect_err("refused").to_string()
    }

    #[test]
    fn a_header_past_the_end_of_the_file_is_refused_unread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file(&dir, "{}", Some(8 << 20), 0);
        let message = TensorFile::open(&path).err().expect("refused").to_string();
        assert!(message.contains("past the end of the file"), "{message}");
    }

    #[test]
    fn a_tensor_the_file_does_not_hold_is_refused_before_any_allocation() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 4 TB claimed by the header, 16 bytes in the file: reading it must not reserve 4 TB.
        let header =
            r#"{"w":{"dtype":"F32","shape":[1000000000,1000],"data_offsets":[0,4000000000000]},"#
                .to_string()
                + r#""x":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,16]},"#
                + r#""ok":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let path = file(&dir, &header, None, 16);
        let mut tensors = TensorFile::open(&path).expect("open");
        let message = error(tensors.read("w", &[1_000_000_000, 1000]));
        assert!(
            message.contains("ends past the end of the file"),
            "{message}"
        );
        let message = error(tensors.read("x", &[1 << 62, 8]));
        assert!(message.contains("too large"), "{message}");
        assert_eq!(tensors.read("ok", &[4]).expect("read"), [0.0; 4]);
    }

    #[test]
    fn half_precision_values_convert_exactly() {
        assert_eq!(half_to_f32(0x3c00), 1.0);
        assert_eq!(half_to_f32(0xc000), -2.0);
        assert_eq!(half_to_f32(0x3555), 0.333_251_95);
        assert_eq!(half_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(half_to_f32(0x7bff), 65504.0);
        assert!(half_to_f32(0x7c00).is_infinite());
    }
}
