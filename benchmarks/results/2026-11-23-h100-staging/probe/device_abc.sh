for s in a b c; do d=wheels; [[ $s == a ]] && d=wheels_base; [[ $s == b ]] && d=wheels_b; python3 -m pip install -q --no-index --no-deps --target /tmp/site_$s $d/*.whl; done
for i in 1 2 3 4; do for s in a b c; do PYTHONPATH=/tmp/site_$s python3 scratch/ab.py $s; done; done 2>&1 | tee $OUT/abc.txt
PYTHONPATH=/tmp/site_c python3 -m pytest -q -p no:cacheprovider tests/python/test_memory.py tests/python/test_cuda.py tests/python/test_threads.py 2>&1 | tail -3 | tee $OUT/pytest_quick.txt
