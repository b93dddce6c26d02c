//! `batchpool unzip`: an application package's zip unpacked on its node by the node's own copy
//! of this program, so a node image needs no `unzip` (Debian's slim images have none). Every
//! entry is written below the target directory through [`Dir`], which never follows a link:
//! an entry named `../x` or `/x` is refused, and a link an earlier entry made is never written
//! through. Links in the package are made as the links they are.

use std::io::{self, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;

use crate::sys::safe_fs::Dir;

/// The most a link's target may be: Linux's own limit on a path.
const MAX_LINK: u64 = 4096;

/// Unpacks the zip file `zip` into the directory `dir`, which exists.
pub fn unzip(zip: &Path, dir: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::open(zip).with_context(|| format!("opening {}", zip.display()))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file))
        .with_context(|| format!("{} is not a zip file", zip.display()))?;
    let root = Dir::open_root_in_node(dir).with_context(|| format!("opening {}", dir.display()))?;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i)?;
        let shown = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let name = entry.enclosed_name().with_context(|| {
            format!("the entry {shown:?} leads outside the package's directory")
        })?;
        unpack(&root, &name, &mut entry).with_context(|| format!("unpacking {shown:?}"))?;
    }
    Ok(())
}

/// Writes one entry at `name` below `root`.
fn unpack(
    root: &Dir,
    name: &Path,
    entry: &mut zip::read::ZipFile<'_, impl io::Read>,
) -> io::Result<()> {
    if entry.is_dir() {
        return root.create_dir_all(name).map(drop);
    }
    let parent = root.create_dir_all(name.parent().unwrap_or(Path::new("")))?;
    let file_name = name
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an entry without a name"))?;
    if entry.is_symlink() {
        let mut target = Vec::new();
        entry.take(MAX_LINK).read_to_end(&mut target)?;
        return parent.symlink(
            std::os::unix::ffi::OsStrExt::from_bytes(&target[..]),
            file_name,
        );
    }
    let mut out = parent.create_file(file_name)?;
    io::copy(entry, &mut out)?;
    if let Some(mode) = entry.unix_mode() {
        out.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use zip::write::SimpleFileOptions;

    use super::*;

    /// A zip of `entries`: (name, Some(contents) for a file, None for a link to "/etc").
    fn zip_of(dir: &Path, entries: &[(&str, Option<&str>)]) -> std::path::PathBuf {
        let path = dir.join("package.zip");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = SimpleFileOptions::default().unix_permissions(0o750);
        for (name, contents) in entries {
            match contents {
                Some(text) => {
                    zip.start_file(*name, options).unwrap();
                    zip.write_all(text.as_bytes()).unwrap();
                }
                None => zip.add_symlink(*name, "/etc", options).unwrap(),
            }
        }
        zip.finish().unwrap();
        path
    }

    #[test]
    fn files_directories_modes_and_links_are_unpacked() {
        let dir = tempfile::tempdir().unwrap();
        let zip = zip_of(
            dir.path(),
            &[
                ("bin/tool", Some("#!/bin/sh\n")),
                ("a/b/c.txt", Some("c")),
                ("etc", None),
            ],
        );
        let target = dir.path().join("out");
        std::fs::create_dir(&target).unwrap();
        unzip(&zip, &target).unwrap();
        assert_eq!(
            std::fs::read_to_string(target.join("bin/tool")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_to_string(target.join("a/b/c.txt")).unwrap(),
            "c"
        );
        let mode = std::fs::metadata(target.join("bin/tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);
        assert_eq!(
            std::fs::read_link(target.join("etc")).unwrap(),
            Path::new("/etc")
        );
    }

    #[test]
    fn nothing_is_written_outside_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        std::fs::create_dir(&target).unwrap();
        // `..` is refused; a leading `/` is dropped, as Info-ZIP's unzip drops it.
        let unique = format!("escaped-{}", std::process::id());
        let absolute = std::env::temp_dir().join(&unique).display().to_string();
        for name in [format!("../{unique}"), format!("a/../../{unique}")] {
            let zip = zip_of(dir.path(), &[(&name, Some("x"))]);
            let error = unzip(&zip, &target).unwrap_err();
            assert!(format!("{error:#}").contains("leads outside"), "{error:#}");
        }
        let zip = zip_of(dir.path(), &[(&absolute, Some("x"))]);
        unzip(&zip, &target).unwrap();
        assert!(target.join(absolute.trim_start_matches('/')).is_file());
        assert!(!dir.path().join(&unique).exists());
        assert!(!Path::new(&absolute).exists());
        // A link an entry made is never written through: `link/x` replaces the link.
        let outside = tempfile::tempdir().unwrap();
        let zip = {
            let path = dir.path().join("link.zip");
            let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
            let options = SimpleFileOptions::default();
            let to = outside.path().display().to_string();
            zip.add_symlink("link", to, options).unwrap();
            zip.start_file("link/x", options).unwrap();
            zip.write_all(b"x").unwrap();
            zip.finish().unwrap();
            path
        };
        unzip(&zip, &target).unwrap();
        assert!(
            !outside.path().join("x").exists(),
            "written through the link"
        );
        assert_eq!(std::fs::read_to_string(target.join("link/x")).unwrap(), "x");
    }

    #[test]
    fn a_file_that_is_not_a_zip_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("package.zip");
        std::fs::write(&path, "not a zip").unwrap();
        let error = unzip(&path, dir.path()).unwrap_err();
        assert!(
            format!("{error:#}").contains("is not a zip file"),
            "{error:#}"
        );
    }
}
