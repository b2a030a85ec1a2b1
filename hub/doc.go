// Package hub provides the GGUF models a user has (found in kvscope's own
// models folder and, read-only, in the caches of llama.cpp, LM Studio and the
// Hugging Face hub) and downloads new ones from the Hugging Face hub, with
// progress, resume, a free-space check and a sha256 check.
//
// Why a top-level package: it is about the user's machine and the network
// (home folders, environment variables, HTTP), which the inference engine
// under engine/ knows nothing of; the headless commands (kvscope models,
// kvscope pull) and the app's Model tab both use it.
//
// # Finding models
//
// Scan walks the folders of DefaultDirs and reads each *.gguf file's header
// with engine/gguf (the tensor data is mapped, never read), reporting its
// architecture, size, quantization and whether kvscope can run it: its
// architecture is one engine/model accepts (model.ReadConfig) and every
// tensor type is one engine/quant computes. A file that cannot be read is
// listed with its error; the scan never stops on it. The folders, as each
// tool documents or implements them:
//
//   - kvscope: os.UserCacheDir()/kvscope/models/OWNER/NAME/FILE, where Download
//     puts files.
//   - llama.cpp's -hf downloads: LLAMA_CACHE, else os.UserCacheDir()/llama.cpp
//     (fs_get_cache_directory in llama.cpp's common/common.cpp: XDG_CACHE_HOME
//     or ~/.cache on Linux, ~/Library/Caches on macOS, LOCALAPPDATA on
//     Windows), holding flat files named OWNER_NAME_FILE.gguf.
//   - LM Studio: ~/.lmstudio/models/PUBLISHER/MODEL/FILE and the older
//     ~/.cache/lm-studio/models.
//   - the Hugging Face hub cache: HF_HUB_CACHE (or the older
//     HUGGINGFACE_HUB_CACHE), else HF_HOME/hub, else
//     XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (as
//     huggingface_hub's constants.py), laid out as
//     models--OWNER--NAME/snapshots/REVISION/FILE, a symbolic link into
//     blobs/. A file linked from several snapshots is listed once.
//
// # Downloading
//
// Client.Download fetches {HF_ENDPOINT}/{repo}/resolve/{revision}/{file}
// (HF_ENDPOINT defaults to https://huggingface.co; HF_TOKEN, or the token
// file huggingface-cli login writes, is sent as a bearer token). A HEAD
// request, which does not follow the hub's redirect to its CDN, gives the
// size and sha256 (X-Linked-Size and X-Linked-Etag for LFS files, as
// huggingface_hub reads them) and the commit. The free space of the
// destination's file system is checked against what is still to come before
// a byte is written. The bytes stream into FILE.part beside the destination,
// with FILE.part.json recording the remote ETag and size, so that a later
// Download, even in a new process, resumes with a Range request if the file
// on the hub has not changed, and starts over if it has. A connection that
// fails or stalls mid-way is retried from where it stopped. The finished
// file's sha256 is compared with the hub's: a mismatch deletes the part and
// says so; a match renames it into place atomically. The bearer token is
// never sent to another host than the endpoint's, whatever the redirects.
// Progress events (bytes done and total, speed, time left) drive a terminal
// bar or a Fyne ProgressBar; cancelling the context pauses a download,
// keeping its part for the next call, and Discard drops it.
//
// Catalog lists small chat models, with the exact repository and file and
// where each name was checked.
package hub
