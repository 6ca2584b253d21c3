python3 -m pip install -q --no-index --no-deps --target /tmp/site_a wheels_base/*.whl
python3 -m pip install -q --no-index --no-deps --target /tmp/site_b wheels/*.whl
for i in 1 2 3 4; do for s in a b; do PYTHONPATH=/tmp/site_$s python3 scratch/ab.py $s; done; done 2>&1 | tee $OUT/ab.txt
PYTHONPATH=/tmp/site_b python3 -m pytest -q -p no:cacheprovider tests/python/test_memory.py tests/python/test_cuda.py 2>&1 | tail -5 | tee $OUT/pytest_quick.txt
