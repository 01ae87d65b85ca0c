#!/usr/bin/env python3
"""Print the CUDA toolkit include directory kiln builds against (types only: cuda.h, cudaTypedefs.h).

Usage: find-cuda-headers.py SOURCE_ROOT. Looks in $KILN_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda,
then the NVIDIA pip wheels in SOURCE_ROOT/.venv (nvidia/cu13/include). Prints nothing and exits 1 when
none is found; the candidates tried go to stderr.
"""
import glob
import os
import sys


def candidates(root):
    for var in ('KILN_CUDA_HOME', 'CUDA_HOME', 'CUDA_PATH'):
        v = os.environ.get(var)
        if v:
            yield os.path.join(v, 'include')
    yield '/usr/local/cuda/include'
    for sp in sorted(glob.glob(os.path.join(root, '.venv', 'lib', 'python3*', 'site-packages'))):
        yield os.path.join(sp, 'nvidia', 'cu13', 'include')


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    tried = []
    for inc in candidates(root):
        tried.append(inc)
        if os.path.isfile(os.path.join(inc, 'cuda.h')) and os.path.isfile(os.path.join(inc, 'cudaTypedefs.h')):
            print(os.path.realpath(inc))
            return 0
    sys.stderr.write('cuda.h/cudaTypedefs.h not found in: ' + ', '.join(tried) + '\n')
    return 1


if __name__ == '__main__':
    sys.exit(main())
